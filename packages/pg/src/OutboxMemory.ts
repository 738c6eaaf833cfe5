/**
 * The outbox in memory: `Outbox` and `OutboxWorker` over one in-process store with the
 * PostgreSQL queue's semantics — claim tokens that fence every write, leases and retry
 * delays on Effect's `Clock`, per-key order, lease expiries and dead letters, cancellation and
 * topic limits (in flight and rates). For tests of
 * logic that is not about SQL (a projector's leases, deadlines and shutdown on `TestClock`,
 * in milliseconds); what only PostgreSQL can show (locks, commits, crashes) stays in the
 * suites that run against it. Nothing is durable.
 *
 * @since 0.2.0
 */
import type { InvalidInput } from "@effect-durable/core/Errors"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { LimitOptions } from "./FlowControl.js"
import * as Memory from "./internal/queue/memory.js"
import { Outbox } from "./Outbox.js"
import { OutboxWorker } from "./OutboxWorker.js"

/** A message as the in-memory outbox holds it; times are `Clock` milliseconds. */
export interface MemoryRow {
  readonly id: string
  readonly topic: string
  readonly orderingKey: string | null
  /** Its group (`EnqueueOptions.group`): what a topic's per-group limits count. */
  readonly group: string | null
  /** Held while the message is open and not given up to a replacing enqueue. */
  readonly dedupKey: string | null
  readonly payload: unknown
  readonly headers: Readonly<Record<string, string>>
  readonly createdAt: number
  readonly maxAttempts: number
  readonly availableAt: number
  /** When it is due: ready, plus its wait (`EnqueueOptions.maxWait`); claims take the earliest first. */
  readonly dueAt: number
  readonly claimedBy: string | null
  /** The lease's end; `null` when not claimed. */
  readonly claimedUntil: number | null
  readonly generation: number
  readonly attempts: number
  readonly failureCount: number
  readonly leaseExpiries: number
  readonly projectedAt: number | null
  readonly deadAt: number | null
  /** When it was cancelled (then dead too, never a dead letter to redrive), and by whom. */
  readonly cancelledAt: number | null
  readonly cancelledBy: string | null
  readonly lastError: string | null
  readonly failures: ReadonlyArray<
    { readonly attempt: number; readonly worker: string | null; readonly at: string; readonly error: string }
  >
}

export class OutboxMemory extends Context.Service<OutboxMemory, {
  /** Every message, in id order. */
  readonly rows: Effect.Effect<ReadonlyArray<MemoryRow>>
  /**
   * `OutboxAdmin.cancel` in memory: open messages are cancelled, never delivered again, their
   * ordering keys move on; a projector delivering one is told at its next lease renewal and
   * stops that delivery (on PostgreSQL a NOTIFY tells it at once).
   */
  readonly cancel: (
    ids: ReadonlyArray<string>,
    options?: { readonly reason?: string; readonly by?: string }
  ) => Effect.Effect<
    { readonly cancelled: ReadonlyArray<string>; readonly interrupted: ReadonlyArray<string> },
    InvalidInput
  >
  /**
   * `FlowControl.setLimit` in memory, the same options and rules: the topic's and each group's
   * in-flight limit and token bucket, held by every claim. No weighted fair share between
   * groups (claims take them in due order) and no per-group settings.
   */
  readonly setLimit: (topic: string, options: LimitOptions) => Effect.Effect<void, InvalidInput>
  /** Removes a topic's limits; whether it had any. */
  readonly clearLimit: (topic: string) => Effect.Effect<boolean, InvalidInput>
}>()("@effect-durable/pg/OutboxMemory") {}

export interface Options {
  /** Failed deliveries before a message is dead. Default 25, as the outbox's. */
  readonly maxAttempts?: number
}

/** `Outbox`, `OutboxWorker` and `OutboxMemory` over one store, empty at build. */
export const layer = (options: Options = {}): Layer.Layer<Outbox | OutboxWorker | OutboxMemory> =>
  Layer.effectContext(Effect.sync(() => {
    const store = Memory.make(options)
    return Context.make(
      Outbox,
      Outbox.of({
        enqueue: store.enqueue,
        enqueueMany: store.enqueueMany,
        withdraw: store.withdraw,
        waiting: store.waiting,
        channel: "memory",
        cancelChannel: "memory"
      })
    ).pipe(
      Context.add(
        OutboxWorker,
        OutboxWorker.of({
          claim: store.claim,
          markProjected: store.complete,
          markProjectedMany: store.completeMany,
          release: store.release,
          renewLease: store.renew,
          renewLeases: store.renewMany,
          giveBack: store.giveBack,
          holds: store.holds,
          rateWait: store.rateWait
        })
      ),
      Context.add(
        OutboxMemory,
        OutboxMemory.of({
          rows: store.inspect,
          cancel: store.cancel,
          setLimit: store.setLimit,
          clearLimit: store.clearLimit
        })
      )
    )
  }))
