/**
 * The transactional inbox: consumer-side deduplication, so a consumer applies each
 * delivery once over an at-least-once transport. `handle` records the receipt and runs the
 * effect in one transaction: a repeated delivery finds the receipt and does nothing; a
 * failed effect leaves no receipt, so the redelivery runs it. For slow handlers, the
 * stored mode receives now (dedup only) and processes later with the outbox's claims,
 * leases, fencing, retries and dead letters.
 *
 * Receipts must be kept longer than the broker can redeliver (its redelivery or
 * deduplication window); `purge` deletes processed receipts only when asked.
 *
 * @since 0.1.0
 */
import {
  type DatabaseError,
  DurableConfigError,
  InboxClaimMismatch,
  InboxMissing,
  PayloadTooLarge,
  type UnsupportedJsonValue
} from "@effect-durable/core/Errors"
import { canonicalize } from "@effect-durable/core/Fingerprint"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import * as LeasedQueue from "./internal/leasedQueue.js"
import { boundedCount, boundedText } from "./internal/validation.js"
import { timeoutSettings, transact } from "./internal/transaction.js"

export type Claim = LeasedQueue.Claim

export type HandleOutcome<A> =
  | { readonly _tag: "Processed"; readonly value: A }
  | { readonly _tag: "Duplicate" }

export interface InboxEntry {
  readonly id: string
  readonly consumer: string
  readonly messageId: string
  readonly payload: unknown
  readonly headers: Readonly<Record<string, string>>
  readonly receivedAt: string
  readonly attempt: number
  readonly claim: Claim
}

export interface InboxOptions {
  /** Largest stored payload, as canonical JSON bytes. Default 256 KiB. */
  readonly maxPayloadBytes?: number
  /** Processing attempts before a stored entry is dead. Default 25. */
  readonly maxAttempts?: number
}

type Invalid = DurableConfigError | DatabaseError
export type SettleError = InboxClaimMismatch | InboxMissing | Invalid

export class Inbox extends Context.Tag("@effect-durable/pg/Inbox")<Inbox, {
  /**
   * Records the receipt of `messageId` for `consumer` and runs `effect`, in one transaction
   * (a savepoint inside a caller's). A delivery already received is `Duplicate`; `effect`
   * does not run. Concurrent deliveries of one message wait for each other: one runs.
   */
  readonly handle: <A, E, R>(
    consumer: string,
    messageId: string,
    effect: Effect.Effect<A, E, R>
  ) => Effect.Effect<HandleOutcome<A>, E | Invalid, R>
  /** Stored mode: keep the delivery for later processing, unless already received. */
  readonly receive: (
    consumer: string,
    messageId: string,
    payload: unknown,
    headers?: Readonly<Record<string, string>>
  ) => Effect.Effect<"New" | "Duplicate", Invalid | PayloadTooLarge | UnsupportedJsonValue>
  readonly claim: (options: {
    readonly consumer: string
    readonly worker: string
    readonly limit: number
    readonly lease: Duration.DurationInput
  }) => Effect.Effect<ReadonlyArray<InboxEntry>, Invalid>
  /** Marks a claimed entry processed; idempotent for this claim. */
  readonly complete: (claim: Claim) => Effect.Effect<void, SettleError>
  readonly completeMany: (
    claims: ReadonlyArray<Claim>
  ) => Effect.Effect<LeasedQueue.CompleteManyResult<InboxClaimMismatch, InboxMissing>, Invalid>
  readonly release: (claim: Claim, options: LeasedQueue.ReleaseOptions) => Effect.Effect<{ readonly dead: boolean }, SettleError>
  readonly renewLease: (claim: Claim, lease: Duration.DurationInput) => Effect.Effect<void, SettleError>
  readonly deadLetters: (options: {
    readonly consumer?: string
    readonly limit: number
    readonly before?: string
  }) => Effect.Effect<
    {
      readonly items: ReadonlyArray<LeasedQueue.DeadLetter & { readonly consumer: string; readonly messageId: string }>
      readonly next: string | undefined
    },
    Invalid
  >
  readonly redrive: (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<string>, Invalid>
  readonly discard: (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<string>, Invalid>
  /** Deletes receipts processed longer ago than `olderThan`, in batches. */
  readonly purge: (options: LeasedQueue.PurgeOptions) => Effect.Effect<number, Invalid>
}>() {}

const identity = (consumer: string, messageId: string) =>
  Effect.zipRight(boundedText("consumer", consumer, 128), boundedText("messageId", messageId, 256))

/** Checks options before anything is built (`Durable.layer` calls it before connecting). */
export const validateOptions = (options: InboxOptions = {}): Effect.Effect<void, DurableConfigError> =>
  Effect.zipRight(
    boundedCount("maxPayloadBytes", options.maxPayloadBytes ?? 256 * 1024, 64 * 1024 * 1024),
    boundedCount("maxAttempts", options.maxAttempts ?? 25, 10_000)
  )

export const make = (
  options: InboxOptions = {}
): Effect.Effect<Inbox["Type"], DurableConfigError, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const maxPayloadBytes = options.maxPayloadBytes ?? 256 * 1024
    const maxAttempts = options.maxAttempts ?? 25
    yield* boundedCount("maxPayloadBytes", maxPayloadBytes, 64 * 1024 * 1024)
    yield* boundedCount("maxAttempts", maxAttempts, 10_000)
    const table = sql.literal(settings.table("inbox"))
    const queue = LeasedQueue.make(sql, settings, {
      table: settings.table("inbox"),
      claimFunction: settings.table("inbox_claim"),
      filterType: "text",
      done: "processed_at",
      name: "Inbox",
      mismatch: (claim) => new InboxClaimMismatch(claim),
      missing: (messageId) => new InboxMissing({ messageId })
    })

    const handle = <A, E, R>(consumer: string, messageId: string, effect: Effect.Effect<A, E, R>) =>
      Effect.zipRight(
        identity(consumer, messageId),
        transact(
          sql,
          "Inbox.handle",
          Effect.gen(function*() {
            // The timeouts are set before the insert runs: a concurrent delivery of the same
            // message waits on the unique key, bounded by the lock timeout.
            const inserted = yield* sql<{ id: string }>`
              WITH settings AS MATERIALIZED (${timeoutSettings(sql, settings)})
              INSERT INTO ${table} (consumer, message_id, processed_at)
              SELECT ${consumer}, ${messageId}, now() FROM settings
              ON CONFLICT (consumer, message_id) DO NOTHING
              RETURNING id::text AS id`.pipe(classifySqlErrors("Inbox.handle"))
            if (inserted.length === 0) return { _tag: "Duplicate" } as HandleOutcome<A>
            return { _tag: "Processed", value: yield* effect } as HandleOutcome<A>
          })
        )
      ).pipe(Effect.withSpan("Inbox.handle", { attributes: { consumer } }))

    const receive = (consumer: string, messageId: string, payload: unknown, headers: Readonly<Record<string, string>> = {}) =>
      Effect.gen(function*() {
        yield* identity(consumer, messageId)
        const json = yield* canonicalize(payload)
        const bytes = Buffer.byteLength(json, "utf8")
        if (bytes > maxPayloadBytes) return yield* new PayloadTooLarge({ topic: consumer, bytes, limit: maxPayloadBytes })
        const inserted = yield* sql<{ id: string }>`
          INSERT INTO ${table} (consumer, message_id, payload, headers, max_attempts)
          VALUES (${consumer}, ${messageId}, ${json}::jsonb, ${yield* canonicalize(headers)}::jsonb, ${maxAttempts})
          ON CONFLICT (consumer, message_id) DO NOTHING
          RETURNING id::text AS id`.pipe(classifySqlErrors("Inbox.receive"))
        return inserted.length === 0 ? "Duplicate" as const : "New" as const
      }).pipe(Effect.withSpan("Inbox.receive", { attributes: { consumer } }))

    interface ClaimedRow {
      readonly id: string
      readonly generation: string
      readonly attempt: number
      readonly consumer: string
      readonly message_id: string
      readonly payload: unknown
      readonly headers: Record<string, string>
      readonly received_at: string
    }

    const claim = (claimOptions: {
      readonly consumer: string
      readonly worker: string
      readonly limit: number
      readonly lease: Duration.DurationInput
    }) =>
      Effect.zipRight(
        boundedText("consumer", claimOptions.consumer, 128),
        queue.claim<ClaimedRow>(claimOptions, claimOptions.consumer)
      ).pipe(
        Effect.map((rows) =>
          rows.map((row): InboxEntry => ({
            id: row.id,
            consumer: row.consumer,
            messageId: row.message_id,
            payload: row.payload,
            headers: row.headers,
            receivedAt: row.received_at,
            attempt: row.attempt,
            claim: { messageId: row.id, worker: claimOptions.worker, generation: Number(row.generation) }
          }))
        ),
        Effect.withSpan("Inbox.claim")
      )

    return Inbox.of({
      handle,
      receive,
      claim,
      complete: queue.complete,
      completeMany: queue.completeMany,
      release: (c, o) => queue.release(c, o.error, o.retryDelay, o.permanent === true),
      renewLease: queue.renew,
      deadLetters: (o) =>
        queue.deadLetters<{ readonly consumer: string; readonly messageId: string }>(
          o,
          o.consumer === undefined ? sql`true` : sql`consumer = ${o.consumer}`,
          sql`consumer, message_id AS "messageId"`
        ),
      redrive: queue.redrive,
      discard: queue.discard,
      purge: queue.purge
    })
  })

export const layer = (
  options: InboxOptions = {}
): Layer.Layer<Inbox, DurableConfigError, SqlClient.SqlClient | DurableSettings> => Layer.effect(Inbox, make(options))
