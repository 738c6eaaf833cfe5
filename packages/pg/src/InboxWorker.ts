/**
 * The stored inbox as a worker uses it: entries `Inbox.receive` kept are claimed, completed,
 * released and renewed exactly like outbox messages (the same leased-queue code), one
 * consumer at a time.
 *
 * @since 0.1.0
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { specFor } from "./internal/queue/spec.js"
import * as QueueWorker from "./internal/queue/worker.js"
import type * as LeasedQueue from "./LeasedQueue.js"

export interface InboxEntry {
  readonly id: string
  readonly consumer: string
  readonly messageId: string
  readonly payload: unknown
  readonly headers: Readonly<Record<string, string>>
  /** When it was received (database clock), ISO-8601 UTC with microseconds. */
  readonly receivedAt: string
  readonly attempt: number
  readonly claim: LeasedQueue.Claim
}

export interface ClaimOptions {
  readonly consumer: string
  readonly worker: string
  readonly limit: number
  readonly lease: Duration.Input
  /** Leases an entry may lose (its worker died or stalled) before it is dead. Default 10. */
  readonly maxLeaseExpiries?: number
}

export class InboxWorker extends Context.Service<InboxWorker, {
  readonly claim: (options: ClaimOptions) => Effect.Effect<ReadonlyArray<InboxEntry>, InvalidInput | DatabaseError>
  /** Marks a claimed entry processed; idempotent for this claim. */
  readonly complete: LeasedQueue.Complete
  readonly completeMany: LeasedQueue.CompleteMany
  readonly release: LeasedQueue.Release
  readonly renewLease: LeasedQueue.RenewLease
  /** Extends many leases in one statement (a projector renews a batch this way). */
  readonly renewLeases: LeasedQueue.RenewLeases
  /** Unclaims rows whose delivery never started (or is abandoned on shutdown): nothing is counted. */
  readonly giveBack: LeasedQueue.GiveBack
  /** Whether a claim still holds its row (locked until the caller's transaction ends). */
  readonly holds: LeasedQueue.Holds
}>()("@effect-durable/pg/InboxWorker") {}

const decodeConsumer = Input.argument("consumer", Input.Text(128))

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

export const make: Effect.Effect<InboxWorker["Service"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const queue = QueueWorker.make(sql, settings, specFor(settings, "inbox"), "InboxWorker")

    const claim = Effect.fn("InboxWorker.claim")(function*(options: ClaimOptions) {
      const rows = yield* queue.claim<ClaimedRow>(options, yield* decodeConsumer(options.consumer))
      return rows.map((row): InboxEntry => ({
        id: row.id,
        consumer: row.consumer,
        messageId: row.message_id,
        payload: row.payload,
        headers: row.headers,
        receivedAt: row.received_at,
        attempt: row.attempt,
        claim: { messageId: row.id, worker: options.worker, generation: Number(row.generation) }
      }))
    })
    // Each operation's span is named here; the queue implementation is shared with the outbox.
    return InboxWorker.of({
      claim,
      complete: (claim) => Effect.withSpan(queue.complete(claim), "InboxWorker.complete"),
      completeMany: (claims) => Effect.withSpan(queue.completeMany(claims), "InboxWorker.completeMany"),
      release: (claim, options) => Effect.withSpan(queue.release(claim, options), "InboxWorker.release"),
      renewLease: (claim, lease) => Effect.withSpan(queue.renew(claim, lease), "InboxWorker.renewLease"),
      renewLeases: (claims, lease) => Effect.withSpan(queue.renewMany(claims, lease), "InboxWorker.renewLeases"),
      giveBack: (claims, options) => Effect.withSpan(queue.giveBack(claims, options), "InboxWorker.giveBack"),
      holds: (claim) => Effect.withSpan(queue.holds(claim), "InboxWorker.holds")
    })
  }
)

export const layer: Layer.Layer<InboxWorker, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(
  InboxWorker,
  make
)
