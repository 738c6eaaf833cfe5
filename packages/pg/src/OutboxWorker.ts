/**
 * The outbox as a worker (the projector) uses it. `claim` takes ready messages in id order
 * with `FOR UPDATE SKIP LOCKED` and a lease on the database clock; a claim token (id,
 * worker, generation) then fences every write, so a worker that lost its lease can neither
 * mark nor release a message claimed again. Messages that share an ordering key are handed
 * out in id order: a claim takes a key's first open message, and with `perKey` the ready ones
 * right behind it (a keyed run), never one without every open message of its key before it.
 * Delivery is at least once: pair it with an inbox on the consumer side for effectively-once
 * processing.
 *
 * @since 0.1.0
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import { rateWaitQuery } from "./internal/flow/rates.js"
import * as Lifecycle from "./internal/queue/lifecycle.js"
import { specFor } from "./internal/queue/spec.js"
import * as QueueWorker from "./internal/queue/worker.js"
import { messageFields, type MessageRow } from "./internal/rows.js"
import type * as LeasedQueue from "./LeasedQueue.js"

export interface OutboxMessage {
  readonly id: string
  readonly topic: string
  readonly orderingKey: string | null
  readonly payload: unknown
  readonly headers: Readonly<Record<string, string>>
  /** Enqueue time (database clock), ISO-8601 UTC with microseconds. */
  readonly createdAt: string
  /** 1 for the first delivery. */
  readonly attempt: number
  readonly claim: LeasedQueue.Claim
}

export interface ClaimOptions {
  readonly worker: string
  /** Topics to claim from; default all. */
  readonly topics?: ReadonlyArray<string>
  /** At most this many messages (1-1000). */
  readonly limit: number
  /** How long the claim holds before another worker may take the message (up to 1 day). */
  readonly lease: Duration.Input
  /** Leases a message may lose (its worker died or stalled) before it is dead. Default 10. */
  readonly maxLeaseExpiries?: number
  /**
   * The most messages of one ordering key this claim takes (1-1000; default 1): a key's open
   * messages from its first, in id order, up to the first that is not ready. Deliver them in
   * that order, each only after the one before succeeded; give back (`giveBack`) the rest of
   * a run after a failure, so none overtakes the failed one.
   */
  readonly perKey?: number
}

export class OutboxWorker extends Context.Service<OutboxWorker, {
  /** Claims up to `limit` ready messages in id order (optionally of some topics only). */
  readonly claim: (options: ClaimOptions) => Effect.Effect<ReadonlyArray<OutboxMessage>, InvalidInput | DatabaseError>
  /** Marks a claimed message delivered; idempotent for this claim. */
  readonly markProjected: LeasedQueue.Complete
  /** Marks many in one statement; stale or missing ones are reported, not failed. */
  readonly markProjectedMany: LeasedQueue.CompleteMany
  /** Gives a claimed message back for a retry, or to the dead letters. */
  readonly release: LeasedQueue.Release
  readonly renewLease: LeasedQueue.RenewLease
  /** Extends many leases in one statement (a projector renews a batch this way). */
  readonly renewLeases: LeasedQueue.RenewLeases
  /** Unclaims rows whose delivery never started (or is abandoned on shutdown): nothing is counted. */
  readonly giveBack: LeasedQueue.GiveBack
  /** Whether a claim still holds its row (locked until the caller's transaction ends). */
  readonly holds: LeasedQueue.Holds
  /**
   * After a claim that came back empty: how long until a rate limit of these topics (all when
   * left out) lets a claim take one of their ready messages — the soonest next token of an
   * empty bucket; zero when a token is there already (it came after the claim). None when no
   * rate holds one back (nothing ready, or the topic at its in-flight limit). A projector
   * sleeps this long instead of its poll interval.
   */
  readonly rateWait: (
    topics?: ReadonlyArray<string>
  ) => Effect.Effect<Option.Option<Duration.Duration>, InvalidInput | DatabaseError>
}>()("@effect-durable/pg/OutboxWorker") {}

/** The claim function's fourth argument: the topics, decoded, or `null` for all. */
export const decodeTopics = Input.argument(
  "topics",
  Schema.NullOr(Schema.Array(Input.Text(128)).check(Schema.isMinLength(1), Schema.isMaxLength(1000)))
)

interface ClaimedRow extends MessageRow {
  readonly generation: string
  readonly attempt: number
}

export const make: Effect.Effect<OutboxWorker["Service"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const spec = specFor(settings, "outbox")
    const queue = QueueWorker.make(sql, settings, spec, "OutboxWorker")

    const claim = Effect.fn("OutboxWorker.claim")(function*(options: ClaimOptions) {
      // Per-key order, keyed runs, paused topics and the topic filter live in the claim function (migration 12).
      const rows = yield* queue.claim<ClaimedRow>(options, yield* decodeTopics(options.topics ?? null))
      return rows.map((row): OutboxMessage => ({
        ...messageFields(row),
        attempt: row.attempt,
        claim: { messageId: row.id, worker: options.worker, generation: Number(row.generation) }
      }))
    })
    // Per rated topic with a ready message, not paused, not at its in-flight limit: how long
    // until its claims may take one again. The soonest topic wins.
    const readyIn = (alias: string) => Lifecycle.make(spec, alias).is.ready
    const rateWaitSql = sql.literal(rateWaitQuery(settings.table, readyIn))
    const rateWait = Effect.fn("OutboxWorker.rateWait")(function*(topics?: ReadonlyArray<string>) {
      const only = yield* decodeTopics(topics ?? null)
      const rows = yield* sql<{ readonly seconds: number | null }>`${rateWaitSql}
         AND (${only}::text[] IS NULL OR l.topic = ANY(${only}::text[]))`.pipe(
        classifySqlErrors("OutboxWorker.rateWait")
      )
      const seconds = rows[0]?.seconds ?? null
      return seconds === null ? Option.none() : Option.some(Duration.millis(Math.max(0, seconds) * 1000))
    })

    // Each operation's span is named here; the queue implementation is shared with the inbox.
    return OutboxWorker.of({
      rateWait,
      claim,
      markProjected: (claim) => Effect.withSpan(queue.complete(claim), "OutboxWorker.markProjected"),
      markProjectedMany: (claims) => Effect.withSpan(queue.completeMany(claims), "OutboxWorker.markProjectedMany"),
      release: (claim, options) => Effect.withSpan(queue.release(claim, options), "OutboxWorker.release"),
      renewLease: (claim, lease) => Effect.withSpan(queue.renew(claim, lease), "OutboxWorker.renewLease"),
      renewLeases: (claims, lease) => Effect.withSpan(queue.renewMany(claims, lease), "OutboxWorker.renewLeases"),
      giveBack: (claims, options) => Effect.withSpan(queue.giveBack(claims, options), "OutboxWorker.giveBack"),
      holds: (claim) => Effect.withSpan(queue.holds(claim), "OutboxWorker.holds")
    })
  }
)

export const layer: Layer.Layer<OutboxWorker, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(
  OutboxWorker,
  make
)
