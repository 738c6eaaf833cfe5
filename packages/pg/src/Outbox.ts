/**
 * The transactional outbox, as producers use it: a message is enqueued in the caller's
 * transaction, so it exists if and only if the business change committed, and its wake-up
 * NOTIFY is delivered at commit. Workers take messages through `OutboxWorker` (claim, mark,
 * release, renew); operators through `OutboxAdmin` (dead letters, stats, purge).
 *
 * @since 0.1.0
 */
import {
  DatabaseError,
  type DurableConfigError,
  InvalidInput,
  PayloadTooLarge,
  type UnsupportedJsonValue
} from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Options from "@effect-durable/core/Options"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { createHash } from "node:crypto"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import * as EnqueueSql from "./internal/queue/enqueueSql.js"
import * as QueueOptions from "./internal/queue/options.js"
import * as Prepare from "./internal/queue/prepare.js"
import { decodeIds } from "./internal/queue/spec.js"
import { isoUtc } from "./internal/timestamps.js"
import { transact } from "./internal/transaction.js"

export interface OutboxOptions {
  /** Largest payload, as canonical JSON bytes. Default 256 KiB, at most 64 MiB. */
  readonly maxPayloadBytes?: number
  /** Failed deliveries before a message is dead. Default 25. */
  readonly maxAttempts?: number
  /** Per-topic overrides of `maxAttempts`. */
  readonly maxAttemptsByTopic?: Readonly<Record<string, number>>
}

/** The outbox's options, each declared once: rule, default, variable, purpose, example. */
export const OutboxOptionsTable = Options.declare({
  maxPayloadBytes: QueueOptions.maxPayloadBytes("DURABLE_OUTBOX_MAX_PAYLOAD_BYTES", "outbox"),
  maxAttempts: QueueOptions.maxAttempts(
    "DURABLE_OUTBOX_MAX_ATTEMPTS",
    "failed deliveries before an outbox message is dead"
  ),
  maxAttemptsByTopic: Options.option({
    schema: Schema.Record(Input.Text(128), Input.Count(10_000)),
    default: {},
    purpose: "per-topic overrides of maxAttempts",
    example: `{ "payments": 50 }`
  })
})

/** Every default of the outbox, from its declarations. */
export const Defaults = OutboxOptionsTable.defaults

/** Decodes the options (`Durable.layer` calls it before connecting). */
export const decodeOptions = OutboxOptionsTable.decode

export interface EnqueueOptions {
  /** Not deliverable before now + delay, on the database clock (zero to 365 days). */
  readonly delay?: Duration.Input
  /** Messages with the same key are delivered one at a time, in id order. */
  readonly orderingKey?: string
  /** String headers; the current span's W3C `traceparent` is added. */
  readonly headers?: Readonly<Record<string, string>>
  /**
   * At most one open message per (topic, dedup key) (1-256 bytes): an enqueue with the key of
   * an open message acts on that one, as `dedupMode` says, and returns its id.
   */
  readonly dedupKey?: string
  /**
   * What an enqueue does when a message with its dedup key is open. `keep` (default): nothing,
   * the open one stands (uniqueness). `replace`: it takes this payload, headers, delay and wait
   * (a keyed message keeps its due time, its place in its key; debounce: the last one wins,
   * delivered after the last delay). `extend`: its payload stays, its delay grows to this one's
   * end if that is later (throttle). A message being
   * delivered cannot change: `replace` and `extend` then enqueue a new message, which takes the
   * key over and waits behind it.
   */
  readonly dedupMode?: DedupMode
  /**
   * The group the message belongs to (1-128 bytes: a tenant, a customer): the unit of a
   * per-group limit and of fair share on a limited topic (`FlowControl`). None by default.
   */
  readonly group?: string
  /**
   * Its priority, as a bound on waiting (zero to 30 days; default zero): how long it may wait
   * behind messages that become ready after it. Claims take the earliest due time first —
   * when a message becomes ready plus its wait — so a message without a wait goes before one
   * with an hour's wait enqueued earlier, and none is passed over by a message that became
   * ready more than its wait after it (never starved). For example urgent: none, normal:
   * `"1 minute"`, bulk: `"1 hour"`. On a limited topic it orders each group's messages; fair
   * share chooses between the groups. A key's messages still go in their order.
   */
  readonly maxWait?: Duration.Input
}

export { DEDUP_MODES } from "./internal/queue/prepare.js"
export type DedupMode = typeof Prepare.DEDUP_MODES[number]

/** One message of `enqueueMany`. */
export interface NewMessage {
  readonly topic: string
  readonly payload: unknown
  readonly options?: EnqueueOptions
}

export type EnqueueError = PayloadTooLarge | UnsupportedJsonValue | InvalidInput | DatabaseError

export class Outbox extends Context.Service<Outbox, {
  /** Adds a message in the current transaction; returns its id. */
  readonly enqueue: (topic: string, payload: unknown, options?: EnqueueOptions) => Effect.Effect<string, EnqueueError>
  /** Adds many messages in one statement (at most 100,000); ids in the order given. */
  readonly enqueueMany: (messages: ReadonlyArray<NewMessage>) => Effect.Effect<ReadonlyArray<string>, EnqueueError>
  /**
   * Withdraws, in the current transaction, the open messages no lease holds (waiting: never
   * claimed, given back, or released for a retry): deleted without a trace — unlike
   * `OutboxAdmin.cancel`, which keeps a dead letter — for messages whose delivery no longer
   * matters (the workflow engine's clocks of a finished execution). Earlier failed attempts may
   * have had their effects; withdrawing a key's head lets the rest of its key go on. A message
   * being delivered, or whose lease ran out unsettled (its worker may still be at it), delivered,
   * dead or unknown is left as it is. The ids withdrawn, ascending; at most 10,000 ids (`InvalidInput`).
   */
  readonly withdraw: (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<string>, InvalidInput | DatabaseError>
  /** Of `ids`, the messages still to be delivered (neither delivered nor dead), each with when it is due. */
  readonly waiting: (
    ids: ReadonlyArray<string>
  ) => Effect.Effect<ReadonlyArray<WaitingMessage>, InvalidInput | DatabaseError>
  /** The NOTIFY channel an enqueue wakes at commit. */
  readonly channel: string
  /** The NOTIFY channel a cancellation sends the id of a message being delivered on. */
  readonly cancelChannel: string
}>()("@effect-durable/pg/Outbox") {}

/** A message still to be delivered (`Outbox.waiting`). */
export interface WaitingMessage {
  readonly id: string
  /** When it may be claimed: ISO-8601 UTC, microseconds kept. */
  readonly availableAt: string
}

/** A schema's NOTIFY channel of one kind (channel names are at most 63 bytes: a long schema is hashed). */
const schemaChannel = (kind: string, schema: string): string => {
  const channel = `effect_durable_${kind}:${schema}`
  return Buffer.byteLength(channel) <= 63
    ? channel
    : `effect_durable_${kind}:${createHash("sha256").update(schema).digest("hex").slice(0, 32)}`
}

/** The NOTIFY channel of a schema's outbox: an enqueue wakes the projectors with its topic. */
export const channelFor = (schema: string): string => schemaChannel("outbox", schema)

/** The NOTIFY channel on which a cancellation tells the projectors the id of a message being delivered. */
export const cancelChannelFor = (schema: string): string => schemaChannel("cancel", schema)

/** Tries of a deduplicated enqueue racing others on its key (each one a fresh look) before it gives up, retryable. */
const DEDUP_TRIES = 8

export const make = (
  options: OutboxOptions = {}
): Effect.Effect<Outbox["Service"], DurableConfigError, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const { maxAttempts, maxAttemptsByTopic, maxPayloadBytes } = yield* decodeOptions(options)
    const table = sql.literal(settings.table("outbox"))
    const channel = channelFor(settings.schema)

    // Everything an enqueue checks before it writes: a bad message writes nothing.
    const prepare = Prepare.make({ maxAttempts, maxAttemptsByTopic, maxPayloadBytes })
    const prepareMany = Prepare.many({ maxAttempts, maxAttemptsByTopic, maxPayloadBytes })

    type Row = Effect.Success<ReturnType<typeof prepare>>

    const insert = (row: Row) => Effect.map(EnqueueSql.insert(sql, table, channel, row), (rows) => rows[0]?.id)

    /**
     * The open message holding the row's dedup key, acted on as its mode says, under its row
     * lock: its id, or nothing when it was settled meanwhile (or a racing enqueue took the key
     * a delivered one gave up), to be tried again.
     */
    const settleDuplicate = (row: Row & { readonly dedupKey: string }) =>
      Effect.gen(function*() {
        const [open] = yield* sql<{ id: string; delivering: boolean }>`
          SELECT id::text, claimed_until IS NOT NULL AND claimed_until > now() AS delivering FROM ${table}
           WHERE topic = ${row.topic} AND dedup_key = ${row.dedupKey} AND projected_at IS NULL AND dead_at IS NULL
           FOR UPDATE`
        if (open === undefined) return undefined
        if (row.dedupMode === "keep") return open.id
        if (open.delivering) {
          // Being delivered: it keeps running, a new message takes the key and waits behind it.
          yield* sql`UPDATE ${table} SET dedup_key = NULL WHERE id = ${open.id}::bigint`
          return yield* insert(row)
        }
        // Waiting: changed in place (its lease, if one lapsed, cleared: a late holder's mark is refused).
        const replace = row.dedupMode === "replace"
        const [changed] = yield* sql<{ id: string }>`
          WITH m AS (
            UPDATE ${table} SET
              payload = ${replace ? sql`${row.payload}::jsonb` : sql`payload`},
              headers = ${replace ? sql`${row.headers}::jsonb` : sql`headers`},
              -- Replaced: its new content takes this transaction's place in the feed, and the
              -- feed's consumers read it again there (\`Feed\`); extended, it keeps its place.
              feed_position = ${replace ? sql.literal(`${settings.table("feed_position")}()`) : sql`feed_position`},
              available_at = ${
          replace
            ? sql`now() + make_interval(secs => ${row.delaySeconds})`
            : sql`greatest(available_at, now() + make_interval(secs => ${row.delaySeconds}))`
        },
              -- Replaced: this enqueue's due time. Extended: moved on by as much as its readiness
              -- moved. A keyed message keeps its due time: its place is its key's order.
              due_at = CASE WHEN ordering_key IS NOT NULL THEN due_at ELSE ${
          replace
            ? sql`now() + make_interval(secs => ${row.dueSeconds})`
            : sql`due_at + greatest(now() + make_interval(secs => ${row.delaySeconds}) - greatest(available_at, now()),
                                     interval '0')`
        } END,
              claimed_until = NULL
             WHERE id = ${open.id}::bigint
            RETURNING id, topic)
          SELECT m.id::text AS id, pg_notify(${channel}, m.topic) IS NULL AS notified FROM m`
        return changed?.id
      })

    const enqueue = Effect.fn("Outbox.enqueue")(
      function*(topic: string, payload: unknown, enqueueOptions: EnqueueOptions = {}) {
        const row = yield* prepare(topic, payload, enqueueOptions, yield* Prepare.traceparent)
        const dedupKey = row.dedupKey
        if (dedupKey === null) return (yield* classifySqlErrors("Outbox.enqueue")(insert(row)))!
        for (let tries = 0; tries < DEDUP_TRIES; tries++) {
          // The common case, one statement: the key is free.
          const id = (yield* classifySqlErrors("Outbox.enqueue")(insert(row))) ??
            (yield* transact(
              sql,
              "Outbox.enqueue",
              classifySqlErrors("Outbox.enqueue")(settleDuplicate({ ...row, dedupKey }))
            ))
          if (id !== undefined) return id
        }
        return yield* new DatabaseError({
          code: null,
          retryable: true,
          operation: "Outbox.enqueue",
          detail:
            `dedup key ${dedupKey} of topic ${topic} changed hands ${DEDUP_TRIES} times while this enqueue looked at it`
        })
      }
    )

    const enqueueMany = Effect.fn("Outbox.enqueueMany")(function*(messages: ReadonlyArray<NewMessage>) {
      if (messages.length === 0) return []
      const rows = yield* prepareMany(messages, yield* Prepare.traceparent)
      const inserted = yield* EnqueueSql.insertMany(sql, table, channel, rows).pipe(
        classifySqlErrors("Outbox.enqueueMany")
      )
      // Identities are drawn in insertion order (ORDER BY n), so ascending ids follow the input.
      return inserted.map((row) => BigInt(row.id)).sort((a, b) => (a < b ? -1 : 1)).map(String)
    })

    const withdraw = Effect.fn("Outbox.withdraw")(function*(ids: ReadonlyArray<string>) {
      const decoded = yield* decodeIds(ids)
      if (decoded.length === 0) return []
      const rows = yield* sql<{ id: string }>`
        DELETE FROM ${table} WHERE id = ANY(${decoded}::bigint[])
           AND claimed_until IS NULL AND projected_at IS NULL AND dead_at IS NULL
        RETURNING id::text AS id`.pipe(classifySqlErrors("Outbox.withdraw"))
      return rows.map((row) => BigInt(row.id)).sort((a, b) => (a < b ? -1 : 1)).map(String)
    })

    const waiting = Effect.fn("Outbox.waiting")(function*(ids: ReadonlyArray<string>) {
      const decoded = yield* decodeIds(ids)
      if (decoded.length === 0) return []
      return yield* sql<WaitingMessage>`
        SELECT id::text AS id, ${sql.literal(isoUtc("available_at"))} AS "availableAt" FROM ${table}
         WHERE id = ANY(${decoded}::bigint[]) AND projected_at IS NULL AND dead_at IS NULL
         ORDER BY id`.pipe(classifySqlErrors("Outbox.waiting"))
    })

    return Outbox.of({
      enqueue,
      enqueueMany,
      withdraw,
      waiting,
      channel,
      cancelChannel: cancelChannelFor(settings.schema)
    })
  })

export const layer = (
  options: OutboxOptions = {}
): Layer.Layer<Outbox, DurableConfigError, SqlClient.SqlClient | DurableSettings> => Layer.effect(Outbox, make(options))
