/**
 * The outbox as operators (the CLI, the admin page) use it: dead letters (list, redrive,
 * discard), replay of projected messages, per-topic counts, purge of projected messages and
 * the plan of the claim. A message that cannot be delivered never blocks those behind it; it
 * waits here for a decision.
 *
 * @since 0.1.0
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import { outboxClaimQuery } from "./internal/migrations/0007_claim_functions.js"
import * as QueueAdmin from "./internal/queue/admin.js"
import { specFor } from "./internal/queue/spec.js"
import { traced } from "./internal/traced.js"
import type * as LeasedQueue from "./LeasedQueue.js"
import { type ClaimOptions, decodeTopics } from "./OutboxWorker.js"

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

/** Retention floor of `purge`: projected messages younger than this are never deleted. */
export const PURGE_FLOOR = "1 minute"

export class OutboxAdmin extends Context.Tag("@effect-durable/pg/OutboxAdmin")<OutboxAdmin, {
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
  /** Counts per topic. */
  readonly stats: Effect.Effect<ReadonlyArray<TopicStats>, DatabaseError>
  /** Messages not yet projected nor dead (of one topic, or all). */
  readonly unprojectedCount: (topic?: string) => Effect.Effect<number, DatabaseError>
  /**
   * Deletes messages projected longer ago than `olderThan` (at least `PURGE_FLOOR`), in
   * batches; never one replayed meanwhile. Returns how many.
   */
  readonly purge: LeasedQueue.Purge
  /** The query plan of a claim with these options (`EXPLAIN (FORMAT JSON)`); claims nothing. */
  readonly explainClaim: (options: ClaimOptions) => Effect.Effect<unknown, InvalidInput | DatabaseError>
}>() {}

export const make: Effect.Effect<OutboxAdmin["Type"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const table = sql.literal(settings.table("outbox"))
    const queue = QueueAdmin.make(sql, settings, specFor(settings, "outbox"), {
      operationPrefix: "OutboxAdmin",
      claimQuery: outboxClaimQuery,
      purgeFloor: PURGE_FLOOR
    })

    return OutboxAdmin.of(traced("OutboxAdmin", {
      deadLetters: (options: { readonly topic?: string; readonly limit: number; readonly before?: string }) =>
        queue.deadLetters(
          options,
          options.topic === undefined ? sql`true` : sql`topic = ${options.topic}`,
          sql`topic`,
          { topic: Schema.String }
        ),
      redrive: queue.redrive,
      replay: queue.replay,
      discard: queue.discard,
      stats: Effect.map(
        queue.counts("topic"),
        (rows) => rows.map(({ done, group, ...counts }): TopicStats => ({ topic: group, ...counts, projected: done }))
      ),
      unprojectedCount: (topic?: string) =>
        sql<{ n: number }>`SELECT count(*)::int AS n FROM ${table}
                            WHERE projected_at IS NULL AND dead_at IS NULL
                            ${topic === undefined ? sql`` : sql`AND topic = ${topic}`}`.pipe(
          Effect.map((rows) => rows[0]!.n),
          classifySqlErrors("OutboxAdmin.unprojectedCount")
        ),
      purge: queue.purge,
      explainClaim: (options: ClaimOptions) =>
        Effect.flatMap(decodeTopics(options.topics ?? null), (topics) => queue.explainClaim(options, topics))
    }))
  }
)

export const layer: Layer.Layer<OutboxAdmin, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(
  OutboxAdmin,
  make
)
