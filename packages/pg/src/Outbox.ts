/**
 * The transactional outbox: a message is enqueued in the caller's transaction, so it exists
 * if and only if the business change committed. Workers claim ready messages in id order
 * with `FOR UPDATE SKIP LOCKED` and a lease on the database clock; a claim token (id, worker,
 * generation) fences every later write, so a worker that lost its lease can neither mark
 * nor release a message claimed again. Messages that share an ordering key are handed out
 * one at a time, in id order: the next only once the previous is projected (or dead). Delivery is at least once; pair it with an inbox on
 * the consumer side for effectively-once processing.
 *
 * @since 0.1.0
 */
import {
  type DatabaseError,
  DurableConfigError,
  OutboxClaimMismatch,
  OutboxMissing,
  PayloadTooLarge,
  type UnsupportedJsonValue
} from "@effect-durable/core/Errors"
import { canonicalize } from "@effect-durable/core/Fingerprint"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { createHash } from "node:crypto"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import * as LeasedQueue from "./internal/leasedQueue.js"
import { boundedCount, boundedText, finiteDuration, seconds } from "./internal/validation.js"

export type Claim = LeasedQueue.Claim
export type DeadLetter = LeasedQueue.DeadLetter

export interface OutboxOptions {
  /** Largest payload, as canonical JSON bytes. Default 256 KiB. */
  readonly maxPayloadBytes?: number
  /** Deliveries before a message is dead. Default 25. */
  readonly maxAttempts?: number
  /** Per-topic overrides of `maxAttempts`. */
  readonly maxAttemptsByTopic?: Readonly<Record<string, number>>
}

export interface EnqueueOptions {
  /** Not deliverable before now + delay, on the database clock. */
  readonly delay?: Duration.DurationInput
  /** Messages with the same key are delivered one at a time, in id order. */
  readonly orderingKey?: string
  /** String headers; the current span's W3C `traceparent` is added. */
  readonly headers?: Readonly<Record<string, string>>
}

export interface OutboxMessage {
  readonly id: string
  readonly topic: string
  readonly orderingKey: string | null
  readonly payload: unknown
  readonly headers: Readonly<Record<string, string>>
  /** Enqueue time, database clock, with microseconds. */
  readonly createdAt: string
  /** 1 for the first delivery. */
  readonly attempt: number
  readonly claim: Claim
}

export interface TopicStats {
  readonly topic: string
  /** Deliverable now. */
  readonly ready: number
  /** Waiting for their delay (or retry backoff). */
  readonly delayed: number
  /** Held by a live lease. */
  readonly claimed: number
  readonly dead: number
  /** Projected and not yet purged. */
  readonly projected: number
  /** How long the oldest ready message has been deliverable, in seconds (`null`: none). */
  readonly oldestReadySeconds: number | null
}

export type EnqueueError = PayloadTooLarge | UnsupportedJsonValue | DurableConfigError | DatabaseError
export type SettleError = OutboxClaimMismatch | OutboxMissing | DurableConfigError | DatabaseError

export class Outbox extends Context.Tag("@effect-durable/pg/Outbox")<Outbox, {
  /** Adds a message in the current transaction; returns its id. */
  readonly enqueue: (topic: string, payload: unknown, options?: EnqueueOptions) => Effect.Effect<string, EnqueueError>
  /** Adds many messages in one statement; ids in the order given. */
  readonly enqueueMany: (
    messages: ReadonlyArray<{ readonly topic: string; readonly payload: unknown; readonly options?: EnqueueOptions }>
  ) => Effect.Effect<ReadonlyArray<string>, EnqueueError>
  /** Claims up to `limit` ready messages in id order (optionally of some topics only). */
  readonly claim: (options: {
    readonly worker: string
    readonly topics?: ReadonlyArray<string>
    readonly limit: number
    readonly lease: Duration.DurationInput
  }) => Effect.Effect<ReadonlyArray<OutboxMessage>, DurableConfigError | DatabaseError>
  /** The query plan of a claim with these options (`EXPLAIN (FORMAT JSON)`); claims nothing. */
  readonly explainClaim: (options: {
    readonly worker: string
    readonly topics?: ReadonlyArray<string>
    readonly limit: number
    readonly lease: Duration.DurationInput
  }) => Effect.Effect<unknown, DurableConfigError | DatabaseError>
  /** Marks a claimed message delivered; idempotent for this claim. */
  readonly markProjected: (claim: Claim) => Effect.Effect<void, SettleError>
  /** Marks many in one statement; stale or missing ones are reported, not thrown. */
  readonly markProjectedMany: (
    claims: ReadonlyArray<Claim>
  ) => Effect.Effect<LeasedQueue.CompleteManyResult<OutboxClaimMismatch, OutboxMissing>, DurableConfigError | DatabaseError>
  /**
   * Gives a claimed message back: deliverable again after `retryDelay`, or dead at once
   * when `permanent` or out of attempts. Returns whether it is dead.
   */
  readonly release: (claim: Claim, options: LeasedQueue.ReleaseOptions) => Effect.Effect<{ readonly dead: boolean }, SettleError>
  /** Extends the lease of a message still held by this claim. */
  readonly renewLease: (claim: Claim, lease: Duration.DurationInput) => Effect.Effect<void, SettleError>
  readonly deadLetters: (options: {
    readonly topic?: string
    readonly limit: number
    /** The `next` of the previous page. */
    readonly before?: string
  }) => Effect.Effect<
    { readonly items: ReadonlyArray<DeadLetter & { readonly topic: string }>; readonly next: string | undefined },
    DurableConfigError | DatabaseError
  >
  /** Makes dead messages deliverable again with fresh attempts. */
  readonly redrive: (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<string>, DurableConfigError | DatabaseError>
  /** Makes projected messages deliverable again (deliver once more). */
  readonly replay: (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<string>, DurableConfigError | DatabaseError>
  /** Deletes dead messages. */
  readonly discard: (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<string>, DurableConfigError | DatabaseError>
  readonly stats: Effect.Effect<ReadonlyArray<TopicStats>, DatabaseError>
  /** Messages not yet projected nor dead. */
  readonly unprojectedCount: (topic?: string) => Effect.Effect<number, DatabaseError>
  /** Deletes projected messages older than `olderThan`, in batches; never a replayed one. */
  readonly purge: (options: LeasedQueue.PurgeOptions) => Effect.Effect<number, DurableConfigError | DatabaseError>
  /** The NOTIFY channel an enqueue wakes at commit. */
  readonly channel: string
}>() {}

const DEFAULT_MAX_PAYLOAD = 256 * 1024
const MAX_HEADER_BYTES = 16 * 1024

/** The NOTIFY channel of a schema's outbox (channel names are at most 63 bytes). */
export const channelFor = (schema: string): string => {
  const channel = `effect_durable_outbox:${schema}`
  return Buffer.byteLength(channel) <= 63
    ? channel
    : `effect_durable_outbox:${createHash("sha256").update(schema).digest("hex").slice(0, 32)}`
}

const traceparent = Effect.map(Effect.currentSpan, (span) => `00-${span.traceId}-${span.spanId}-${span.sampled ? "01" : "00"}`)
  .pipe(Effect.option)

/** Checks options before anything is built (`Durable.layer` calls it before connecting). */
export const validateOptions = (options: OutboxOptions = {}): Effect.Effect<void, DurableConfigError> =>
  Effect.gen(function*() {
    yield* boundedCount("maxPayloadBytes", options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD, 64 * 1024 * 1024)
    yield* boundedCount("maxAttempts", options.maxAttempts ?? 25, 10_000)
    for (const [topic, attempts] of Object.entries(options.maxAttemptsByTopic ?? {})) {
      yield* boundedCount(`maxAttemptsByTopic.${topic}`, attempts, 10_000)
    }
  })

export const make = (
  options: OutboxOptions = {}
): Effect.Effect<Outbox["Type"], DurableConfigError, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    yield* validateOptions(options)
    const maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD
    const maxAttempts = options.maxAttempts ?? 25
    const attemptsFor = (topic: string) => options.maxAttemptsByTopic?.[topic] ?? maxAttempts
    const table = sql.literal(settings.table("outbox"))
    const channel = channelFor(settings.schema)
    const queue = LeasedQueue.make(sql, settings, {
      table: settings.table("outbox"),
      claimFunction: settings.table("outbox_claim"),
      filterType: "text[]",
      done: "projected_at",
      name: "Outbox",
      mismatch: (claim) => new OutboxClaimMismatch(claim),
      missing: (messageId) => new OutboxMissing({ messageId })
    })

    // Everything an enqueue checks before it writes: a bad message writes nothing.
    const prepare = (topic: string, payload: unknown, enqueueOptions: EnqueueOptions, trace: Option.Option<string>) =>
      Effect.gen(function*() {
        yield* boundedText("topic", topic, 128)
        if (enqueueOptions.orderingKey !== undefined) yield* boundedText("orderingKey", enqueueOptions.orderingKey, 256)
        if (enqueueOptions.delay !== undefined) yield* finiteDuration("delay", enqueueOptions.delay, true)
        const json = yield* canonicalize(payload)
        const bytes = Buffer.byteLength(json, "utf8")
        if (bytes > maxPayloadBytes) return yield* new PayloadTooLarge({ topic, bytes, limit: maxPayloadBytes })
        const headers: Record<string, string> = { ...enqueueOptions.headers }
        if (Option.isSome(trace) && headers.traceparent === undefined) headers.traceparent = trace.value
        if (!Object.values(headers).every((value) => typeof value === "string")) {
          return yield* new DurableConfigError({ field: "headers", rule: "string values" })
        }
        const headersJson = yield* canonicalize(headers)
        if (Buffer.byteLength(headersJson) > MAX_HEADER_BYTES) {
          return yield* new DurableConfigError({ field: "headers", rule: `at most ${MAX_HEADER_BYTES} bytes` })
        }
        return {
          topic,
          orderingKey: enqueueOptions.orderingKey ?? null,
          payload: json,
          headers: headersJson,
          delaySeconds: enqueueOptions.delay === undefined ? 0 : seconds(enqueueOptions.delay),
          maxAttempts: attemptsFor(topic)
        }
      })

    // One statement, no transaction of its own: it joins the caller's, and pg_notify's
    // wake-up is delivered only if that transaction commits.
    const enqueue = (topic: string, payload: unknown, enqueueOptions: EnqueueOptions = {}) =>
      Effect.gen(function*() {
        const row = yield* prepare(topic, payload, enqueueOptions, yield* traceparent)
        const inserted = yield* sql<{ id: string }>`
          WITH m AS (
            INSERT INTO ${table} (topic, ordering_key, payload, headers, available_at, max_attempts)
            VALUES (${row.topic}, ${row.orderingKey}, ${row.payload}::jsonb, ${row.headers}::jsonb,
                    now() + make_interval(secs => ${row.delaySeconds}), ${row.maxAttempts})
            RETURNING id, topic)
          SELECT m.id::text AS id, pg_notify(${channel}, m.topic) IS NULL AS notified FROM m`.pipe(
          classifySqlErrors("Outbox.enqueue")
        )
        return inserted[0]!.id
      }).pipe(Effect.withSpan("Outbox.enqueue", { attributes: { topic } }))

    const enqueueMany = (messages: ReadonlyArray<{ readonly topic: string; readonly payload: unknown; readonly options?: EnqueueOptions }>) =>
      Effect.gen(function*() {
        if (messages.length === 0) return []
        yield* boundedCount("messages", messages.length, 100_000)
        const trace = yield* traceparent
        const rows = yield* Effect.forEach(messages, (m) => prepare(m.topic, m.payload, m.options ?? {}, trace))
        const inserted = yield* sql<{ id: string }>`
          WITH m AS (
            INSERT INTO ${table} (topic, ordering_key, payload, headers, available_at, max_attempts)
            SELECT t, k, p::jsonb, h::jsonb, now() + make_interval(secs => d), a
              FROM unnest(${rows.map((r) => r.topic)}::text[], ${rows.map((r) => r.orderingKey)}::text[],
                          ${rows.map((r) => r.payload)}::text[], ${rows.map((r) => r.headers)}::text[],
                          ${rows.map((r) => r.delaySeconds)}::float8[], ${rows.map((r) => r.maxAttempts)}::int[])
                   WITH ORDINALITY AS u(t, k, p, h, d, a, n)
             ORDER BY n
            RETURNING id, topic),
          -- One wake-up per topic, not per row (each pg_notify call is checked for duplicates).
          notified AS (SELECT count(pg_notify(${channel}, t.topic)) AS n FROM (SELECT DISTINCT topic FROM m) t)
          SELECT m.id::text AS id FROM m CROSS JOIN notified`.pipe(
          classifySqlErrors("Outbox.enqueueMany")
        )
        // Identities are drawn in insertion order (ORDER BY n), so ascending ids follow the input.
        return inserted.map((row) => BigInt(row.id)).sort((a, b) => (a < b ? -1 : 1)).map(String)
      }).pipe(Effect.withSpan("Outbox.enqueueMany", { attributes: { count: messages.length } }))

    interface ClaimedRow {
      readonly id: string
      readonly generation: string
      readonly attempt: number
      readonly topic: string
      readonly ordering_key: string | null
      readonly payload: unknown
      readonly headers: Record<string, string>
      readonly created_at: string
    }

    const claim = (claimOptions: {
      readonly worker: string
      readonly topics?: ReadonlyArray<string>
      readonly limit: number
      readonly lease: Duration.DurationInput
    }) =>
      Effect.gen(function*() {
        const topics = claimOptions.topics
        if (topics !== undefined) {
          yield* boundedCount("topics", topics.length, 1000)
          for (const topic of topics) yield* boundedText("topics", topic, 128)
        }
        // Per-key order and the topic filter live in the claim function (migration 7).
        const rows = yield* queue.claim<ClaimedRow>(claimOptions, topics ?? null)
        return rows.map((row): OutboxMessage => ({
          id: row.id,
          topic: row.topic,
          orderingKey: row.ordering_key,
          payload: row.payload,
          headers: row.headers,
          createdAt: row.created_at,
          attempt: row.attempt,
          claim: { messageId: row.id, worker: claimOptions.worker, generation: Number(row.generation) }
        }))
      }).pipe(Effect.withSpan("Outbox.claim"))

    const stats = sql<TopicStats>`
      SELECT topic,
             count(*) FILTER (WHERE open AND live_lease IS NOT TRUE AND available_at <= now())::int AS ready,
             count(*) FILTER (WHERE open AND live_lease IS NOT TRUE AND available_at > now())::int AS delayed,
             count(*) FILTER (WHERE open AND live_lease)::int AS claimed,
             count(*) FILTER (WHERE dead_at IS NOT NULL)::int AS dead,
             count(*) FILTER (WHERE projected_at IS NOT NULL)::int AS projected,
             extract(epoch FROM now() - min(available_at) FILTER (
               WHERE open AND live_lease IS NOT TRUE AND available_at <= now()))::float8 AS "oldestReadySeconds"
        FROM (SELECT topic, available_at, dead_at, projected_at,
                     projected_at IS NULL AND dead_at IS NULL AS open,
                     claimed_until > now() AS live_lease
                FROM ${table}) o
       GROUP BY topic
       ORDER BY topic`.pipe(classifySqlErrors("Outbox.stats"))

    const unprojectedCount = (topic?: string) =>
      sql<{ n: number }>`SELECT count(*)::int AS n FROM ${table}
                          WHERE projected_at IS NULL AND dead_at IS NULL
                          ${topic === undefined ? sql`` : sql`AND topic = ${topic}`}`.pipe(
        Effect.map((rows) => rows[0]!.n),
        classifySqlErrors("Outbox.unprojectedCount")
      )

    return Outbox.of({
      enqueue,
      enqueueMany,
      claim,
      explainClaim: (o) => queue.explainClaim(o, o.topics ?? null),
      markProjected: (c) => queue.complete(c).pipe(Effect.withSpan("Outbox.markProjected")),
      markProjectedMany: (claims) => queue.completeMany(claims).pipe(Effect.withSpan("Outbox.markProjectedMany")),
      release: (c, o) =>
        queue.release(c, o.error, o.retryDelay, o.permanent === true).pipe(Effect.withSpan("Outbox.release")),
      renewLease: (c, lease) => queue.renew(c, lease).pipe(Effect.withSpan("Outbox.renewLease")),
      deadLetters: (o) =>
        queue.deadLetters<{ readonly topic: string }>(
          o,
          o.topic === undefined ? sql`true` : sql`topic = ${o.topic}`,
          sql`topic`
        ),
      redrive: queue.redrive,
      replay: queue.replay,
      discard: queue.discard,
      stats,
      unprojectedCount,
      purge: queue.purge,
      channel
    })
  })

export const layer = (
  options: OutboxOptions = {}
): Layer.Layer<Outbox, DurableConfigError, SqlClient.SqlClient | DurableSettings> => Layer.effect(Outbox, make(options))
