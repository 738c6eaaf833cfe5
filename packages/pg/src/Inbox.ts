/**
 * The transactional inbox: consumer-side deduplication, so a consumer applies each
 * delivery once over an at-least-once transport. `handle` records the receipt and runs the
 * effect in one transaction: a repeated delivery finds the receipt and does nothing; a
 * failed effect leaves no receipt, so the redelivery runs it. For slow handlers, `receive`
 * stores the delivery now (dedup only) and `InboxWorker` processes it later with the
 * outbox's claims, leases, fencing, retries and dead letters (`InboxAdmin` for operators).
 *
 * Receipts must be kept longer than the broker can redeliver (its redelivery or
 * deduplication window); `InboxAdmin.purge` deletes processed receipts only when asked.
 *
 * @since 0.1.0
 */
import {
  type DatabaseError,
  type DurableConfigError,
  type InvalidInput,
  PayloadTooLarge,
  type UnsupportedJsonValue
} from "@effect-durable/core/Errors"
import { canonicalize, canonicalizeWithin } from "@effect-durable/core/Fingerprint"
import * as Input from "@effect-durable/core/Input"
import * as Options from "@effect-durable/core/Options"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import * as QueueOptions from "./internal/queue/options.js"
import { bounded } from "./internal/transaction.js"

export interface InboxOptions {
  /** Largest stored payload, as canonical JSON bytes. Default 256 KiB, at most 64 MiB. */
  readonly maxPayloadBytes?: number
  /** Processing attempts before a stored entry is dead. Default 25. */
  readonly maxAttempts?: number
}

/** The inbox's options, each declared once. */
export const InboxOptionsTable = Options.declare({
  maxPayloadBytes: QueueOptions.maxPayloadBytes("DURABLE_INBOX_MAX_PAYLOAD_BYTES", "stored inbox"),
  maxAttempts: QueueOptions.maxAttempts(
    "DURABLE_INBOX_MAX_ATTEMPTS",
    "processing attempts before a stored inbox entry is dead"
  )
})

/** Every default of the inbox, from its declarations. */
export const Defaults = InboxOptionsTable.defaults

/** Decodes the options (`Durable.layer` calls it before connecting). */
export const decodeOptions = InboxOptionsTable.decode

export type HandleOutcome<A> =
  | { readonly _tag: "Processed"; readonly value: A }
  | { readonly _tag: "Duplicate" }

export class Inbox extends Context.Service<Inbox, {
  /**
   * Records the receipt of `messageId` for `consumer` and runs `effect`, in one transaction
   * (a savepoint inside a caller's). A delivery already received is `Duplicate`; `effect`
   * does not run. Concurrent deliveries of one message wait for each other: one runs.
   */
  readonly handle: <A, E, R>(
    consumer: string,
    messageId: string,
    effect: Effect.Effect<A, E, R>
  ) => Effect.Effect<HandleOutcome<A>, E | InvalidInput | DatabaseError, R>
  /** Stored mode: keep the delivery for later processing (`InboxWorker`), unless already received. */
  readonly receive: (
    consumer: string,
    messageId: string,
    payload: unknown,
    headers?: Readonly<Record<string, string>>
  ) => Effect.Effect<"New" | "Duplicate", InvalidInput | DatabaseError | PayloadTooLarge | UnsupportedJsonValue>
}>()("@effect-durable/pg/Inbox") {}

const decodeConsumer = Input.argument("consumer", Input.Text(128))
const decodeMessageId = Input.argument("messageId", Input.Text(256))
const decodeHeaders = Input.argument("headers", Schema.Record(Input.Text(256), Input.OptionalText(16 * 1024)))

const identity = (consumer: string, messageId: string) =>
  Effect.andThen(decodeConsumer(consumer), decodeMessageId(messageId))

export const make = (
  options: InboxOptions = {}
): Effect.Effect<Inbox["Service"], DurableConfigError, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const { maxAttempts, maxPayloadBytes } = yield* decodeOptions(options)
    const table = sql.literal(settings.table("inbox"))

    const handle = Effect.fn("Inbox.handle")(
      function*<A, E, R>(consumer: string, messageId: string, effect: Effect.Effect<A, E, R>) {
        yield* identity(consumer, messageId)
        return yield* bounded(
          sql,
          settings,
          "Inbox.handle",
          Effect.gen(function*() {
            // The timeouts are in force before the insert runs: a concurrent delivery of the
            // same message waits on the unique key, bounded by the lock timeout.
            const inserted = yield* sql<{ id: string }>`
            INSERT INTO ${table} (consumer, message_id, processed_at)
            VALUES (${consumer}, ${messageId}, now())
            ON CONFLICT (consumer, message_id) DO NOTHING
            RETURNING id::text AS id`
            if (inserted.length === 0) return { _tag: "Duplicate" } as HandleOutcome<A>
            return { _tag: "Processed", value: yield* classifySqlErrors("Inbox.handle")(effect) } as HandleOutcome<A>
          })
        )
      }
    )

    const receive = Effect.fn("Inbox.receive")(
      function*(consumer: string, messageId: string, payload: unknown, headers: Readonly<Record<string, string>> = {}) {
        yield* identity(consumer, messageId)
        const json = yield* Effect.fromResult(Result.mapError(
          canonicalizeWithin(payload, maxPayloadBytes),
          (error) => error._tag === "PayloadTooLarge" ? new PayloadTooLarge({ ...error, topic: consumer }) : error
        ))
        const headersJson = yield* canonicalize(yield* decodeHeaders(headers))
        const inserted = yield* sql<{ id: string }>`
          INSERT INTO ${table} (consumer, message_id, payload, headers, max_attempts)
          VALUES (${consumer}, ${messageId}, ${json}::jsonb, ${headersJson}::jsonb, ${maxAttempts})
          ON CONFLICT (consumer, message_id) DO NOTHING
          RETURNING id::text AS id`.pipe(classifySqlErrors("Inbox.receive"))
        return inserted.length === 0 ? "Duplicate" as const : "New" as const
      }
    )

    return Inbox.of({ handle, receive })
  })

export const layer = (
  options: InboxOptions = {}
): Layer.Layer<Inbox, DurableConfigError, SqlClient.SqlClient | DurableSettings> => Layer.effect(Inbox, make(options))
