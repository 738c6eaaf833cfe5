/**
 * One batch, from claim to settlement: claim up to `batchSize` messages, publish them on the
 * lanes under the keeper's watch, then settle every outcome — failures released one by one
 * (retry with backoff, or dead), successes marked in one statement per second of delivery
 * (a mark lost to a dropped connection retried while the lease holds), stale claims never
 * written. Claims not settled when the projector stops are released for another worker.
 */
import { DatabaseError, type InvalidInput } from "@effect-durable/core/Errors"
import { printable } from "@effect-durable/core/Printable"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import * as Ref from "effect/Ref"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import * as Semaphore from "effect/Semaphore"
import type { Counts } from "../Projector.js"
import { type Batching, type Publish, Publisher, type PublishError } from "../Publisher.js"
import { Delivery } from "./delivery.js"
import { makeKeeper } from "./keeper.js"
import { makeLanes, PAYLOAD_DOES_NOT_DECODE } from "./lanes.js"
import { type Settings, topicsNow } from "./options.js"
import { forTopic, metrics, registerCounters, tracing } from "./telemetry.js"

const OUTCOMES = ["delivered", "retried", "dead", "stale", "heldBack", "cancelled"] as const
type Outcome = typeof OUTCOMES[number]
const noOutcomes: Record<Outcome, number> = {
  delivered: 0,
  retried: 0,
  dead: 0,
  stale: 0,
  heldBack: 0,
  cancelled: 0
}

/**
 * A death's reason as logged: a payload that does not decode is said without the decoder's
 * message, which quotes the payload's values (it is in the message's last error, for the page).
 */
const reasonForLog = (reason: string): string =>
  reason.startsWith(PAYLOAD_DOES_NOT_DECODE)
    ? `${PAYLOAD_DOES_NOT_DECODE} with its topic's schema (the issues are in the message's last error)`
    : printable(reason.slice(0, 500))

export const noCounts: Counts = { claimed: 0, ...noOutcomes }

export const addCounts = (a: Counts, b: Counts): Counts => ({
  claimed: a.claimed + b.claimed,
  delivered: a.delivered + b.delivered,
  retried: a.retried + b.retried,
  dead: a.dead + b.dead,
  stale: a.stale + b.stale,
  heldBack: a.heldBack + b.heldBack,
  cancelled: a.cancelled + b.cancelled
})

/**
 * The settings with a batch publisher: a claim takes at least one full batch, and at most one
 * batch of a key (a key's run is never split between two calls, which could run at once).
 */
const forPublisher = (settings: Settings, batch: Batching | undefined): Settings =>
  batch === undefined ? settings : {
    ...settings,
    batchSize: Math.max(settings.batchSize, batch.maxSize),
    perKey: Math.min(settings.perKey, batch.maxSize)
  }

/** A claimed batch: how many messages it took, and the delivery that settles them. */
export interface ClaimedBatch {
  readonly claimed: number
  readonly deliver: Effect.Effect<Counts, DatabaseError | InvalidInput>
}

/**
 * One projector's machinery over the `OutboxWorker` and `Publisher` in context:
 * `claimBatch` claims once and hands back the delivery that settles what it claimed
 * (`deliverBatch` does both in turn); `keeper` must run beside them.
 * `keeperOutbox` is the keeper's own (one connection of its own), when the projector has one.
 */
export const makeBatches = (options: Settings, keeperOutbox?: OutboxWorker.OutboxWorker["Service"]) =>
  Effect.gen(function*() {
    yield* registerCounters
    const outbox = yield* OutboxWorker.OutboxWorker
    const publisher = yield* Publisher
    const settings = forPublisher(options, publisher.batch)
    const keeper = makeKeeper(settings, keeperOutbox ?? outbox)
    const session = publisher.session ??
      (<A, E>(use: (publish: Publish) => Effect.Effect<A, E>) => use(publisher.publish))
    const lanes = yield* makeLanes(settings, session, publisher.batch)
    // Claims not yet settled: whatever is here when the projector stops is released.
    const inFlight = yield* Ref.make(new Map<string, OutboxWorker.OutboxMessage["claim"]>())
    // The batches being delivered, for a cancellation to find the one holding its message.
    const deliveries = new Set<Delivery>()
    const forget = (ids: Iterable<string>) =>
      Ref.update(inFlight, (map) => {
        for (const id of ids) map.delete(id)
        return map
      })

    // A worker killed or frozen mid-batch leaves at most this much of its deliveries unmarked
    // (each delivered again after its lease); a batch shorter than this costs no extra statement.
    const markEvery = Duration.min(
      Duration.seconds(1),
      Duration.divide(settings.lease, 3).pipe(Option.getOrElse(() => Duration.seconds(1)))
    )
    const settleRetry = Schedule.min([Schedule.exponential(Duration.millis(100)), Schedule.spaced(Duration.seconds(1))])
      .pipe(
        Schedule.upTo({ duration: settings.lease })
      )

    // Exponential in the attempt with full jitter, within the topic's [min, max]; `Retry-After`
    // wins when longer.
    const backoff = (message: OutboxWorker.OutboxMessage, error: PublishError) =>
      Effect.map(Random.next, (random) => {
        const bounds = Object.hasOwn(settings.backoffByTopic, message.topic)
          ? settings.backoffByTopic[message.topic]
          : undefined
        const min = Duration.toMillis(bounds?.min ?? settings.backoffMin)
        const max = Duration.toMillis(bounds?.max ?? settings.backoffMax)
        const ceiling = Math.min(max, min * 2 ** Math.min(message.attempt - 1, 30))
        return Math.max(random * ceiling, min / 2, error.retryAfterMillis ?? 0)
      })

    const settleFailure = Effect.fnUntraced(
      function*(message: OutboxWorker.OutboxMessage, error: PublishError) {
        const retryDelay = error.retryable ? yield* backoff(message, error) : 0
        const released = yield* settling(outbox.release(message.claim, {
          error: error.reason,
          retryDelay: Duration.millis(Math.min(retryDelay, Duration.toMillis(Duration.days(365)))),
          permanent: !error.retryable
        })).pipe(Effect.result)
        if (Result.isFailure(released)) {
          if (released.failure._tag !== "DatabaseError") {
            // Refused: the claim went stale (another holder now), or the row is gone. Said once.
            yield* Effect.logWarning("effect-durable projector: release refused").pipe(
              Effect.annotateLogs({ messageId: message.id, topic: message.topic, reason: released.failure.message })
            )
            return "stale" as const
          }
          // The release itself failed: the message keeps its lease and is retried once it
          // expires. The rest of the batch is not held back by it.
          yield* Effect.logWarning(
            `effect-durable projector: release of ${message.id} failed: ${printable(released.failure.message)}`
          )
          return "retried" as const
        }
        if (!released.success.dead) return "retried" as const
        // Each death said once, at the default level: topic, id, attempts, reason; never the payload.
        yield* Effect.logWarning(
          `effect-durable projector: message ${message.id} of topic ${
            printable(message.topic)
          } is dead after ${message.attempt} ${message.attempt === 1 ? "attempt" : "attempts"} (${
            error.retryable ? "out of attempts" : "a permanent failure"
          }): ${reasonForLog(error.reason)}`
        ).pipe(Effect.annotateLogs({
          messageId: message.id,
          topic: message.topic,
          attempts: message.attempt,
          permanent: !error.retryable
        }))
        return "dead" as const
      }
    )

    /**
     * Marks, releases and give-backs are fenced (worker and claim generation), so they are
     * safe to send again: one that failed on a lost connection (a terminated backend, a
     * restart) is retried while the lease may still hold, instead of leaving its messages to
     * the lease (delivered again after it, or waiting for it). Each attempt runs whole; the
     * waits between attempts can be interrupted.
     */
    const settling = <A, E>(statement: Effect.Effect<A, E>) =>
      Effect.uninterruptible(statement).pipe(
        Effect.retry({ schedule: settleRetry, while: (error) => error instanceof DatabaseError && error.retryable })
      )
    const markProjected = (claims: ReadonlyArray<OutboxWorker.OutboxMessage["claim"]>) =>
      settling(outbox.markProjectedMany(claims))

    /**
     * The marks of one batch: `flush` marks, in one statement, the messages published since
     * the last flush (never one whose claim a renewal found stale). Flushes run one at a time,
     * so a message is taken once; a flush that fails puts its messages back for the next.
     */
    const makeMarks = (claimed: ReadonlyArray<OutboxWorker.OutboxMessage>, delivery: Delivery) => {
      const marked = new Set<string>()
      const oneAtATime = Semaphore.makeUnsafe(1)
      const flush = oneAtATime.withPermits(1)(Effect.suspend(() => {
        // Taken out of the renewals while marked (a renewal would find a marked row gone).
        const taken = delivery.takePublished()
        if (taken.length === 0) return Effect.void
        return markProjected(taken.map((i) => claimed[i]!.claim)).pipe(
          Effect.map(({ completed }) => {
            for (const id of completed) marked.add(id)
            delivery.marked(taken)
          }),
          Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : Effect.sync(() => delivery.putBack(taken)))
        )
      }))
      return { flush, marked }
    }

    const claimOptions: OutboxWorker.ClaimOptions = {
      worker: settings.workerId,
      limit: settings.batchSize,
      lease: settings.lease,
      maxLeaseExpiries: settings.maxLeaseExpiries,
      // A key's backlog comes as one run, delivered in order on one lane.
      perKey: settings.perKey
    }
    /**
     * One claim of up to `batchSize` messages (the worker and the topics asked anew each time;
     * none while the topics are none), in a `projector.claim` span.
     */
    const claim = Effect.suspend(() => {
      const topics = topicsNow(settings)
      if (topics === undefined) return outbox.claim(claimOptions)
      return topics.length === 0 ? Effect.succeed([]) : outbox.claim({ ...claimOptions, topics })
    }).pipe(
      Effect.withSpan("projector.claim", { attributes: { "effect_durable.worker": settings.workerId } })
    )

    /**
     * Claims one batch: how many it took and the delivery that settles every message in it (none
     * when it took nothing). The claims are listed in flight at once, so a shutdown before the
     * delivery starts gives them back. `onEnded` is told, once per message, when its mark is
     * written (the rest when the batch is over): the published messages of a batch whose last
     * publish takes long are done with at their periodic marks; the long one holds only itself.
     */
    const claimBatch = (onEnded: (count: number) => void): Effect.Effect<
      ClaimedBatch | undefined,
      DatabaseError | InvalidInput
    > =>
      Effect.gen(function*() {
        // The leases run from no earlier than this: the batch's lease clock starts here (Delivery).
        const claimedAt = yield* Clock.currentTimeMillis
        const claimed = yield* claim
        if (claimed.length === 0) return undefined
        yield* Ref.update(inFlight, (map) => {
          for (const message of claimed) map.set(message.id, message.claim)
          return map
        })
        return { claimed: claimed.length, deliver: deliverClaimed(claimed, claimedAt, onEnded) }
      })

    /** Delivers a claimed batch and settles every message in it; returns what happened. */
    const deliverClaimed = (
      claimed: ReadonlyArray<OutboxWorker.OutboxMessage>,
      claimedAt: number,
      onEnded: (count: number) => void
    ) =>
      Effect.gen(function*() {
        yield* Metric.update(metrics.claimed, claimed.length)
        yield* Metric.update(metrics.batchSize, claimed.length)
        // Per-message metrics are updated directly (what `Metric.update` does, in the fiber's
        // context: its registry and metric attributes), not as one effect per message.
        const context = yield* Effect.context<never>()
        const now = yield* Clock.currentTimeMillis
        for (const message of claimed) {
          forTopic(metrics.lag, message.topic).updateUnsafe(
            Math.max(0, (now - Date.parse(message.createdAt)) / 1000),
            context
          )
        }
        const spans = yield* tracing
        const delivery = new Delivery(
          claimed,
          Duration.toMillis(settings.renewEvery),
          Duration.toMillis(settings.lease),
          claimedAt,
          onEnded
        )
        const settled = Effect.gen(function*() {
          const marks = makeMarks(claimed, delivery)
          // Successes are marked as they accumulate while the batch runs, not only at its end.
          const published = yield* keeper.watching(
            delivery,
            Effect.scoped(Effect.andThen(
              Effect.forkScoped(Effect.repeat(Effect.ignore(marks.flush), Schedule.spaced(markEvery))),
              lanes.publishAll(claimed, delivery, spans)
            ))
          )
          // A claim found stale is never written; one never started with its lease in doubt is
          // given back; failures are settled one by one (a release each).
          const results: Array<Outcome | "published"> = claimed.map((message, i) =>
            marks.marked.has(message.id)
              ? "published"
              : delivery.wasCancelled(message.id)
              ? "cancelled"
              : delivery.isStale(message.id) || delivery.wasSkipped(message.id)
              ? "stale"
              : delivery.wasHeldBack(message.id)
              ? "heldBack"
              : Result.isSuccess(published[i]!)
              ? "published"
              : "retried"
          )
          const unstarted = claimed.filter((m) =>
            (delivery.wasSkipped(m.id) || delivery.wasHeldBack(m.id)) && !delivery.isStale(m.id)
          )
          if (unstarted.length > 0) {
            yield* Effect.ignore(settling(outbox.giveBack(unstarted.map((m) => m.claim), { unstarted: true })))
          }
          const failures = claimed.flatMap((_, i) => {
            const result = published[i]!
            return results[i] === "retried" && Result.isFailure(result) ? [[i, result.failure] as const] : []
          })
          yield* Effect.forEach(
            failures,
            ([i, error]) => Effect.map(settleFailure(claimed[i]!, error), (outcome) => void (results[i] = outcome)),
            { concurrency: settings.concurrency, discard: true }
          )
          // The successes not marked yet, in one statement: the round trip is paid once, not per message.
          yield* marks.flush
          const tally = { ...noCounts, claimed: claimed.length }
          // The counters move once per topic and outcome of the batch, by how many: not once per message.
          const byTopic = new Map<string, Record<Outcome, number>>()
          for (const [i, message] of claimed.entries()) {
            const result = results[i]!
            const outcome: Outcome = result === "published"
              ? (marks.marked.has(message.id) ? "delivered" : "stale")
              : result
            tally[outcome]++
            let counts = byTopic.get(message.topic)
            if (counts === undefined) byTopic.set(message.topic, counts = { ...noOutcomes })
            counts[outcome]++
          }
          for (const [topic, counts] of byTopic) {
            for (const outcome of OUTCOMES) {
              if (counts[outcome] > 0) forTopic(metrics[outcome], topic).updateUnsafe(counts[outcome], context)
            }
          }
          return tally
        })
        // Interrupted (shutdown): the claims stay listed for `releaseInFlight`. Otherwise they are settled.
        return yield* Effect.suspend(() => {
          deliveries.add(delivery)
          return settled
        }).pipe(
          Effect.ensuring(Effect.sync(() => {
            deliveries.delete(delivery)
            delivery.over()
          })),
          Effect.onExit((exit) => Exit.hasInterrupts(exit) ? Effect.void : forget(claimed.map((message) => message.id)))
        )
      })

    /** Claims one batch and settles every message in it; returns what happened. */
    const deliverBatch: Effect.Effect<Counts, DatabaseError | InvalidInput> = Effect.flatMap(
      claimBatch(() => {}),
      (batch) => batch === undefined ? Effect.succeed(noCounts) : batch.deliver
    )

    /** A message was cancelled: the batch holding it (if this projector's) stops it. Whether one did. */
    const cancel = (id: string): boolean => {
      for (const delivery of deliveries) if (delivery.cancel(id)) return true
      return false
    }

    /** Gives back every claim still held (shutdown), in one statement: another worker may take them at once. */
    const releaseInFlight = Effect.gen(function*() {
      const left = yield* Ref.getAndSet(inFlight, new Map())
      if (left.size === 0) return
      yield* Effect.ignore(outbox.giveBack([...left.values()]))
      yield* Effect.logInfo(`effect-durable projector gave back ${left.size} in-flight messages on shutdown`)
    })

    /** How long a rate limit holds back the next claim, if one does: a hint, so a failure is none. */
    const rateWait = Effect.suspend(() => {
      const topics = topicsNow(settings)
      return topics?.length === 0 ? Effect.succeedNone : outbox.rateWait(topics)
    }).pipe(
      Effect.catch(() => Effect.succeedNone),
      Effect.withSpan("projector.rateWait")
    )

    return {
      settings,
      /** How long an idle loop waits for a batch to fill before it claims (a batch publisher's `maxWait`). */
      linger: publisher.batch?.maxWait ?? Duration.zero,
      claimBatch,
      deliverBatch,
      releaseInFlight,
      cancel,
      rateWait,
      renewSoon: keeper.renewSoon,
      keeper: keeper.run
    }
  })
