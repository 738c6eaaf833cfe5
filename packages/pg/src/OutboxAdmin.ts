/**
 * The outbox as operators (the CLI, the admin page) use it: dead letters (list, redrive,
 * discard), replay of projected messages, per-topic counts, purge of projected messages and
 * the plan of the claim. A message that cannot be delivered never blocks those behind it; it
 * waits here for a decision.
 *
 * @since 0.1.0
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import { printable } from "@effect-durable/core/Printable"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import * as QueueAdmin from "./internal/queue/admin.js"
import * as Lifecycle from "./internal/queue/lifecycle.js"
import { specFor } from "./internal/queue/spec.js"
import { decodeRows } from "./internal/rows.js"
import type { MessageState } from "./internal/search/filter.js"
import { isoUtc } from "./internal/timestamps.js"
import type * as LeasedQueue from "./LeasedQueue.js"
import { cancelChannelFor, channelFor } from "./Outbox.js"
import { type ClaimOptions, decodeTopics } from "./OutboxWorker.js"

const PausedTopicRow = Schema.Struct({
  topic: Schema.String,
  pausedAt: Schema.String,
  pausedBy: Schema.NullOr(Schema.String)
})
const decodeTopic = Input.argument("topic", Input.Text(128))
const decodeBy = Input.argument("by", Input.Text(128))

export interface TopicStats {
  readonly topic: string
  /** Deliverable now. */
  readonly ready: number
  /** Waiting for their delay (or retry backoff). */
  readonly delayed: number
  /** Held by a live lease. */
  readonly claimed: number
  readonly dead: number
  /** Called off (`cancel`); dead too, but never a dead letter. */
  readonly cancelled: number
  /** Projected and not yet purged. */
  readonly projected: number
  /** How long the oldest ready message has been deliverable, in seconds (`null`: none). */
  readonly oldestReadySeconds: number | null
  /** Paused: no claim hands out its messages until it is resumed. */
  readonly paused: boolean
}

export interface PausedTopic {
  readonly topic: string
  /** ISO-8601 UTC. */
  readonly pausedAt: string
  /** Who paused it (an operator's name, as given). */
  readonly pausedBy: string | null
}

/** Retention floor of `purge`: projected messages younger than this are never deleted. */
export const PURGE_FLOOR = "1 minute"

export class OutboxAdmin extends Context.Service<OutboxAdmin, {
  /** Dead messages, newest first (of one topic, or all), `limit` (1-1000) per page. */
  readonly deadLetters: (options: {
    readonly topic?: string
    readonly limit: number
    /** The `next` of the previous page. */
    readonly before?: string
  }) => Effect.Effect<LeasedQueue.DeadLetterPage<{ readonly topic: string }>, InvalidInput | DatabaseError>
  /** Makes dead messages deliverable again with fresh attempts; returns the ids redriven. */
  readonly redrive: LeasedQueue.ByIds
  /** Makes projected messages deliverable again (deliver once more); returns the ids replayed. */
  readonly replay: LeasedQueue.ByIds
  /** Deletes dead messages; returns the ids deleted. */
  readonly discard: LeasedQueue.ByIds
  /**
   * Makes delayed messages — waiting out a retry's backoff or an enqueue's delay — deliverable
   * now, their attempts kept, and wakes the projectors. Returns the ids.
   */
  readonly retryNow: LeasedQueue.ByIds
  /**
   * Sends ready or delayed messages to the dead letters with the operator's reason: one that
   * blocks its ordering key stops holding back the key's later messages (redrive brings it back).
   */
  readonly moveAside: LeasedQueue.MoveAside
  /**
   * Cancels messages waiting or being delivered (state `cancelled`): never delivered again; a
   * projector delivering one interrupts that delivery at once, and its late mark is refused.
   * Later messages of their ordering keys move on.
   */
  readonly cancel: LeasedQueue.Cancel
  /** Makes cancelled messages deliverable again with fresh attempts (and wakes the projectors); returns the ids. */
  readonly restore: LeasedQueue.ByIds
  /** Counts per topic (paused topics included, even when empty). */
  readonly stats: Effect.Effect<ReadonlyArray<TopicStats>, DatabaseError>
  /**
   * Pauses a topic: claims skip its messages (other topics flow on) until `resume`. The flag
   * is durable and every projector honours it at its next claim. Returns whether it was
   * running before.
   */
  readonly pause: (
    topic: string,
    options?: { readonly by?: string }
  ) => Effect.Effect<boolean, InvalidInput | DatabaseError>
  /** Resumes a paused topic and wakes the projectors at commit. Returns whether it was paused. */
  readonly resume: (topic: string) => Effect.Effect<boolean, InvalidInput | DatabaseError>
  /** The paused topics. */
  readonly paused: Effect.Effect<ReadonlyArray<PausedTopic>, DatabaseError>
  /** Messages not yet projected nor dead (of one topic, or all). */
  readonly unprojectedCount: (topic?: string) => Effect.Effect<number, InvalidInput | DatabaseError>
  /**
   * Deletes messages projected longer ago than `olderThan` (at least `PURGE_FLOOR`), in
   * batches; never one replayed meanwhile. Returns how many.
   */
  readonly purge: LeasedQueue.Purge
  /** The query plan of a claim with these options (`EXPLAIN (FORMAT JSON)`); claims nothing. */
  readonly explainClaim: LeasedQueue.ExplainClaim<ClaimOptions>
}>()("@effect-durable/pg/OutboxAdmin") {}

export const make: Effect.Effect<OutboxAdmin["Service"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const table = sql.literal(settings.table("outbox"))
    const pausedTopics = sql.literal(settings.table("paused_topics"))
    const channel = channelFor(settings.schema)

    const paused = sql`
      SELECT topic, ${
      sql.literal(isoUtc("paused_at"))
    } AS "pausedAt", paused_by AS "pausedBy" FROM ${pausedTopics} ORDER BY topic`.pipe(
      decodeRows(PausedTopicRow),
      classifySqlErrors("OutboxAdmin.paused")
    )
    const spec = specFor(settings, "outbox")
    const lifecycle = Lifecycle.make(spec)
    const queue = QueueAdmin.make(sql, spec, {
      operationPrefix: "OutboxAdmin",
      purgeFloor: PURGE_FLOOR
    })

    const deadLetters = Effect.fn("OutboxAdmin.deadLetters")(function*(
      options: { readonly topic?: string; readonly limit: number; readonly before?: string }
    ) {
      const topic = options.topic === undefined ? undefined : yield* decodeTopic(options.topic)
      return yield* queue.deadLetters(
        options,
        topic === undefined ? sql`true` : sql`topic = ${topic}`,
        sql`topic`,
        { topic: Schema.String }
      )
    })

    const stats = Effect.map(Effect.all([queue.counts("topic"), paused]), ([rows, pausedList]) => {
      const pausedSet = new Set(pausedList.map((p) => p.topic))
      const stats = rows.map(({ done, group, ...counts }): TopicStats => ({
        topic: group,
        ...counts,
        projected: done,
        paused: pausedSet.has(group)
      }))
      const empty = pausedList.filter((p) => !stats.some((s) => s.topic === p.topic)).map((p): TopicStats => ({
        topic: p.topic,
        ...(Object.fromEntries(Lifecycle.OUTBOX_STATE_NAMES.map((name) => [name, 0])) as Record<MessageState, number>),
        oldestReadySeconds: null,
        paused: true
      }))
      return [...stats, ...empty].sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : 0))
    }).pipe(Effect.withSpan("OutboxAdmin.stats"))

    const pause = Effect.fn("OutboxAdmin.pause")(function*(topic: string, options: { readonly by?: string } = {}) {
      const decoded = yield* decodeTopic(topic)
      const by = options.by === undefined ? null : yield* decodeBy(options.by)
      const rows = yield* sql`INSERT INTO ${pausedTopics} (topic, paused_by) VALUES (${decoded}, ${by})
                              ON CONFLICT (topic) DO NOTHING RETURNING topic`.pipe(
        classifySqlErrors("OutboxAdmin.pause")
      )
      return rows.length > 0
    })

    const resume = Effect.fn("OutboxAdmin.resume")(function*(topic: string) {
      const decoded = yield* decodeTopic(topic)
      // The wake-up is sent at commit, so projectors claim right after the flag is gone.
      const rows = yield* sql`
        WITH gone AS (DELETE FROM ${pausedTopics} WHERE topic = ${decoded} RETURNING topic)
        SELECT pg_notify(${channel}, topic) IS NULL AS notified FROM gone`.pipe(classifySqlErrors("OutboxAdmin.resume"))
      return rows.length > 0
    })

    const unprojectedCount = Effect.fn("OutboxAdmin.unprojectedCount")(function*(topic?: string) {
      const decoded = topic === undefined ? undefined : yield* decodeTopic(topic)
      const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${table}
                                             WHERE ${sql.literal(lifecycle.open)}
                                             ${decoded === undefined ? sql`` : sql`AND topic = ${decoded}`}`.pipe(
        classifySqlErrors("OutboxAdmin.unprojectedCount")
      )
      return rows[0]!.n
    })

    const explainClaim = Effect.fn("OutboxAdmin.explainClaim")(
      function*(options: ClaimOptions, explain: LeasedQueue.ExplainOptions = {}) {
        return yield* queue.explainClaim(options, yield* decodeTopics(options.topics ?? null), explain.analyze === true)
      }
    )

    // The projectors claim what became ready (or what a moved-aside message held back) at once,
    // not at their next poll. Only a wake-up: the rows changed already, so a failure is logged.
    const wake = (ids: ReadonlyArray<string>) =>
      ids.length === 0 ? Effect.succeed(ids) : sql`
        SELECT count(pg_notify(${channel}, t.topic)) AS n
          FROM (SELECT DISTINCT topic FROM ${sql.literal(settings.table("outbox_messages"))}
                 WHERE id = ANY(${ids}::bigint[])) t`.pipe(
        Effect.catch((error) =>
          Effect.logDebug(`effect-durable: the wake-up after an operator action failed: ${printable(error.message)}`)
        ),
        Effect.as(ids)
      )

    return OutboxAdmin.of({
      deadLetters,
      retryNow: (ids) => Effect.withSpan(Effect.flatMap(queue.retryNow(ids), wake), "OutboxAdmin.retryNow"),
      moveAside: (ids, options) =>
        Effect.withSpan(Effect.flatMap(queue.moveAside(ids, options), wake), "OutboxAdmin.moveAside"),
      // A cancelled message no longer holds back its ordering key: the projectors are woken.
      cancel: (ids, options = {}) =>
        Effect.withSpan(
          Effect.tap(queue.cancel(ids, options, cancelChannelFor(settings.schema)), (done) => wake(done.cancelled)),
          "OutboxAdmin.cancel"
        ),
      restore: (ids) => Effect.withSpan(Effect.flatMap(queue.restore(ids), wake), "OutboxAdmin.restore"),
      redrive: (ids) => Effect.withSpan(queue.redrive(ids), "OutboxAdmin.redrive"),
      replay: (ids) => Effect.withSpan(queue.replay(ids), "OutboxAdmin.replay"),
      discard: (ids) => Effect.withSpan(queue.discard(ids), "OutboxAdmin.discard"),
      stats,
      pause,
      resume,
      paused: Effect.withSpan(paused, "OutboxAdmin.paused"),
      unprojectedCount,
      purge: (options) => Effect.withSpan(queue.purge(options), "OutboxAdmin.purge"),
      explainClaim
    })
  }
)

export const layer: Layer.Layer<OutboxAdmin, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(
  OutboxAdmin,
  make
)
