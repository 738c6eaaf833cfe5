/**
 * The inbox as operators use it: dead entries of the stored mode (list, redrive, discard),
 * retry now and move aside for its delayed or ready entries,
 * per-consumer counts, and the purge of processed receipts. Keep receipts longer than the
 * broker can redeliver: a receipt purged before the last redelivery lets it run again.
 *
 * @since 0.1.0
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import type { ClaimOptions } from "./InboxWorker.js"
import * as QueueAdmin from "./internal/queue/admin.js"
import { specFor } from "./internal/queue/spec.js"
import type * as LeasedQueue from "./LeasedQueue.js"

const decodeConsumer = Input.argument("consumer", Input.Text(128))

export interface ConsumerStats {
  readonly consumer: string
  /** Stored entries processable now. */
  readonly ready: number
  readonly delayed: number
  readonly claimed: number
  readonly dead: number
  /** Called off (`cancel`); dead too, but never a dead letter. */
  readonly cancelled: number
  /** Receipts of processed deliveries (both modes), not yet purged. */
  readonly processed: number
  readonly oldestReadySeconds: number | null
}

/** Retention floor of `purge`: receipts younger than this are never deleted. */
export const PURGE_FLOOR = "1 hour"

export class InboxAdmin extends Context.Service<InboxAdmin, {
  readonly deadLetters: (options: {
    readonly consumer?: string
    readonly limit: number
    readonly before?: string
  }) => Effect.Effect<
    LeasedQueue.DeadLetterPage<{ readonly consumer: string; readonly messageId: string }>,
    InvalidInput | DatabaseError
  >
  readonly redrive: LeasedQueue.ByIds
  readonly discard: LeasedQueue.ByIds
  /** Makes delayed stored entries (a retry's backoff) processable now, their attempts kept. Returns the ids. */
  readonly retryNow: LeasedQueue.ByIds
  /** Sends ready or delayed stored entries to the dead letters with the operator's reason. */
  readonly moveAside: LeasedQueue.MoveAside
  /**
   * Cancels stored entries waiting or being processed (state `cancelled`): never processed
   * again; a worker processing one has its late mark refused (it is not interrupted).
   */
  readonly cancel: LeasedQueue.Cancel
  /** Makes cancelled entries processable again with fresh attempts; returns the ids. */
  readonly restore: LeasedQueue.ByIds
  /** Counts per consumer. */
  readonly stats: Effect.Effect<ReadonlyArray<ConsumerStats>, DatabaseError>
  /** Deletes receipts processed longer ago than `olderThan` (at least `PURGE_FLOOR`), in batches. */
  readonly purge: LeasedQueue.Purge
  /** The query plan of a stored-mode claim (`EXPLAIN (FORMAT JSON)`); claims nothing. */
  readonly explainClaim: LeasedQueue.ExplainClaim<ClaimOptions>
}>()("@effect-durable/pg/InboxAdmin") {}

export const make: Effect.Effect<InboxAdmin["Service"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const queue = QueueAdmin.make(sql, specFor(settings, "inbox"), {
      operationPrefix: "InboxAdmin",
      purgeFloor: PURGE_FLOOR
    })
    const deadLetters = Effect.fn("InboxAdmin.deadLetters")(function*(
      options: { readonly consumer?: string; readonly limit: number; readonly before?: string }
    ) {
      const consumer = options.consumer === undefined ? undefined : yield* decodeConsumer(options.consumer)
      return yield* queue.deadLetters(
        options,
        consumer === undefined ? sql`true` : sql`consumer = ${consumer}`,
        sql`consumer, message_id AS "messageId"`,
        { consumer: Schema.String, messageId: Schema.String }
      )
    })

    const explainClaim = Effect.fn("InboxAdmin.explainClaim")(
      function*(options: ClaimOptions, explain: LeasedQueue.ExplainOptions = {}) {
        return yield* queue.explainClaim(options, yield* decodeConsumer(options.consumer), explain.analyze === true)
      }
    )

    return InboxAdmin.of({
      deadLetters,
      redrive: (ids) => Effect.withSpan(queue.redrive(ids), "InboxAdmin.redrive"),
      discard: (ids) => Effect.withSpan(queue.discard(ids), "InboxAdmin.discard"),
      retryNow: (ids) => Effect.withSpan(queue.retryNow(ids), "InboxAdmin.retryNow"),
      moveAside: (ids, options) => Effect.withSpan(queue.moveAside(ids, options), "InboxAdmin.moveAside"),
      // No inbox worker listens for cancellations: a processing one is fenced out, not interrupted.
      cancel: (ids, options = {}) => Effect.withSpan(queue.cancel(ids, options, undefined), "InboxAdmin.cancel"),
      restore: (ids) => Effect.withSpan(queue.restore(ids), "InboxAdmin.restore"),
      stats: Effect.map(
        queue.counts("consumer"),
        (rows) =>
          rows.map(({ done, group, ...counts }): ConsumerStats => ({ consumer: group, ...counts, processed: done }))
      ).pipe(Effect.withSpan("InboxAdmin.stats")),
      purge: (options) => Effect.withSpan(queue.purge(options), "InboxAdmin.purge"),
      explainClaim
    })
  }
)

export const layer: Layer.Layer<InboxAdmin, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(
  InboxAdmin,
  make
)
