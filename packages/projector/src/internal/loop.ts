/**
 * The projector's running shape: claim loops (`batchesInFlight`, at most three) and the keeper,
 * forked into the layer's scope. A loop claims a batch and hands it to a fiber of its own that delivers and
 * settles it, then claims again. What is claimed and not yet marked is bounded by message
 * permits (`batchesInFlight` batches' worth): a loop claims once a full batch of them is free,
 * and each message gives its permit back when its mark is written (published messages are marked
 * within a second, a batch's failures when it is over).
 * So a publish that takes long (a workflow run blocked in an activity) holds its own permit and
 * lane, not a loop or the rest of its batch: the loops go on claiming for the free lanes, in
 * full batches as before. A NOTIFY wakes one idle loop; a loop that claimed a full batch wakes the
 * next (more is likely waiting) — waking all at once would have them race for one message.
 * An empty claim right after a busy one asks whether a rate limit holds the topics back, and
 * sleeps until its next token (at most the poll interval) instead of the whole interval: a
 * rate above the burst per poll interval is still reached.
 * With a batch publisher's `maxWait`, a loop woken after an empty claim waits that long
 * before it claims, so a trickle of messages is handed over as one batch (a backlog is claimed
 * in full batches without waiting).
 * A store failure (of a claim, or of a batch's settlement in its own fiber: the database
 * restarting, a missing table) backs off on a capped schedule (started over by the next
 * success) and carries on; closing the scope stops claiming, waits
 * for in-flight batches up to the shutdown deadline and releases what is left.
 */
import { DatabaseError, type InvalidInput } from "@effect-durable/core/Errors"
import { printable } from "@effect-durable/core/Printable"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as FiberSet from "effect/FiberSet"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Ref from "effect/Ref"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import type { Counts } from "../Projector.js"
import { addCounts, type ClaimedBatch, noCounts } from "./batches.js"
import type { Settings } from "./options.js"
import { metrics } from "./telemetry.js"

/** Store failures: 100 ms doubling, jittered, capped at 30 s; reset by the next success. */
const storeBackoff = Schedule.jittered(
  Schedule.min([Schedule.exponential(Duration.millis(100)), Schedule.spaced(Duration.seconds(30))])
)

/** What an operator must do about a failure that waiting alone will not cure. */
const remedy = (error: DatabaseError | InvalidInput): string | undefined => {
  if (!(error instanceof DatabaseError) || error.retryable) return undefined
  switch (error.code) {
    case "3F000":
    case "42P01":
    case "42883":
      return "the substrate's schema is missing or behind: run the migrations (Durable.layer({ migrate: true }) or `effect-durable migrate`)"
    case "42501":
      return "the role lacks privileges: grant them as the owner (Migrations.grantRuntimeAccess or `effect-durable grant <role>`)"
    default:
      return "a permanent database error; the projector keeps retrying slowly"
  }
}

/**
 * How many messages may be claimed and not yet marked: the batches in flight's worth. A loop
 * claims once a full batch of them is free, so the loops wait only while more than all but one
 * batch's worth are still being published or marked.
 */
export const messagePermits = (settings: Settings): number => settings.batchesInFlight * settings.batchSize

/**
 * The most claim loops. A loop hands each batch over and claims again, so more loops would only
 * add empty claims when idle: more batches in flight are claimed for by these.
 */
export const CLAIM_LOOPS = 3

export const runLoops = (
  settings: Settings,
  batches: {
    readonly claimBatch: (
      onEnded: (count: number) => void
    ) => Effect.Effect<ClaimedBatch | undefined, DatabaseError | InvalidInput>
    readonly rateWait: Effect.Effect<Option.Option<Duration.Duration>>
    readonly releaseInFlight: Effect.Effect<void>
    readonly keeper: Effect.Effect<void>
    readonly linger: Duration.Duration
  }
): Effect.Effect<{ readonly wake: () => void; readonly counts: Effect.Effect<Counts> }, never, Scope.Scope> =>
  Effect.gen(function*() {
    const totals = yield* Ref.make(noCounts)
    const wake = yield* Queue.sliding<void>(1)
    const stop = yield* Deferred.make<void>()
    const stopped = Deferred.await(stop)
    const idleFor = (wait: Duration.Duration) =>
      Effect.raceFirst(Effect.raceFirst(Queue.take(wake), Effect.sleep(wait)), stopped)
    // A batch settled: what its marks gave back (a limit's capacity, a key's turn) may be
    // claimable now. Heard only by a loop idling for its poll interval with nothing held back
    // by a rate (that one waits for its token), so it claims again at once, as a loop did when
    // it delivered its own batch before claiming again.
    const settled = yield* Queue.sliding<void>(1)
    const idleUntilSettled = (wait: Duration.Duration) => Effect.raceFirst(idleFor(wait), Queue.take(settled))
    // A token is due at the wait's end: a millisecond later it is surely there.
    const tokenLag = Duration.millis(1)
    // How soon to look again when a token is there and the claim still came back empty.
    const heldBack = Duration.millis(50)
    const lingers = Duration.isGreaterThan(batches.linger, Duration.zero)
    // Message permits free (claimed and marked, or never claimed), and a wake for a loop
    // waiting for a batch of them; the batches being delivered, awaited at shutdown.
    let free = messagePermits(settings)
    const freed = yield* Queue.sliding<void>(1)
    const giveBack = (count: number) => {
      free += count
      if (count > 0 && free >= settings.batchSize) Queue.offerUnsafe(freed, undefined)
    }
    /** Waits for a batch of free permits and takes them; false when the projector stops first. */
    const takeBatch = Effect.gen(function*() {
      if (yield* Deferred.isDone(stop)) return false
      while (free < settings.batchSize) {
        if (!(yield* Effect.raceFirst(Effect.as(Queue.take(freed), true), Effect.as(stopped, false)))) return false
      }
      free -= settings.batchSize
      // Another batch's worth for another waiting loop.
      if (free >= settings.batchSize) Queue.offerUnsafe(freed, undefined)
      return true
    })
    const delivering = yield* FiberSet.make<void>()
    const storeFailure = (error: DatabaseError | InvalidInput) =>
      Effect.gen(function*() {
        const fix = remedy(error)
        yield* Metric.update(metrics.storeErrors, 1)
        yield* (fix === undefined
          ? Effect.logWarning(`effect-durable projector: ${printable(error.message)}; retrying`)
          : Effect.logError(`effect-durable projector: ${printable(error.message)}; ${fix}`))
      })
    // The store backoff's steps while claims or settlements keep failing (shared by the loops:
    // a batch's settlement fails in its own fiber); an empty claim or a settled batch drops it,
    // so the next failure starts the schedule over.
    let backoff: ((error: DatabaseError | InvalidInput) => Effect.Effect<unknown, unknown>) | undefined
    // A batch whose settlement failed since a loop last looked: the next loop to claim backs off first.
    let settlementFailed: DatabaseError | InvalidInput | undefined
    /** Sleeps the schedule's next delay, unless the projector stops first. */
    const backOff = (error: DatabaseError | InvalidInput) =>
      Effect.gen(function*() {
        backoff ??= yield* Schedule.toStepWithSleep(storeBackoff)
        yield* Effect.raceFirst(Effect.ignore(backoff(error)), stopped)
      })
    // Delivers a claimed batch in a fiber of its own (its messages give their permits back).
    const deliver = (batch: Effect.Effect<Counts, DatabaseError | InvalidInput>) =>
      FiberSet.run(delivering)(
        batch.pipe(
          Effect.flatMap((counts) =>
            Effect.andThen(
              Effect.sync(() => {
                backoff = undefined
                Queue.offerUnsafe(settled, undefined)
              }),
              Ref.update(totals, (t) => addCounts(t, counts))
            )
          ),
          Effect.catch((error) =>
            Effect.andThen(storeFailure(error), Effect.sync(() => void (settlementFailed = error)))
          ),
          Effect.tapDefect((defect) => Effect.logError("effect-durable projector: a batch's delivery died", defect))
        )
      )

    const loop = Effect.gen(function*() {
      // Whether the last claim took something, or the last sleep was for a token: only then is
      // a rate worth asking about (an idle projector's empty claims cost no more than before).
      let busy = false
      // Whether the last empty claim was made because a token was there already.
      let tokenNow = false
      // Whether the last claim came back empty with no rate holding messages back: the backlog
      // is drained, so the next claim first lingers, for a batch publisher's batch to fill.
      let drained = false
      while (!(yield* Deferred.isDone(stop))) {
        if (settlementFailed !== undefined) {
          const error = settlementFailed
          settlementFailed = undefined
          yield* backOff(error)
          continue
        }
        if (drained && lingers) yield* Effect.raceFirst(Effect.sleep(batches.linger), stopped)
        // A batch of free permits first (or the stop): never more claimed than may be in flight.
        if (!(yield* takeBatch)) break
        // A settlement failed while this loop waited for permits: back off before claiming.
        if (settlementFailed !== undefined) {
          giveBack(settings.batchSize)
          continue
        }
        const result = yield* Effect.result(batches.claimBatch(giveBack))
        const batch = Result.isSuccess(result) ? result.success : undefined
        // What the claim did not take is free again at once; what it took, message by message.
        giveBack(settings.batchSize - (batch?.claimed ?? 0))
        if (batch !== undefined) yield* deliver(batch.deliver)
        if (Result.isFailure(result)) {
          const error = result.failure
          yield* storeFailure(error)
          yield* backOff(error)
          continue
        }
        drained = false
        const claimed = batch?.claimed ?? 0
        // Nothing claimed, nothing failed: the store answers again. (A batch's success drops the
        // backoff when it is settled.)
        if (claimed === 0) backoff = undefined
        if (claimed === settings.batchSize) yield* Queue.offer(wake, undefined)
        // Only an empty claim means there is nothing to do: a short batch can be short because
        // of per-key order (one message per key at a time), with the next heads ready now.
        if (claimed === 0) {
          const wait: Option.Option<Duration.Duration> = busy ? yield* batches.rateWait : Option.none()
          // A token came between the empty claim and the question: claim again at once. Zero
          // again after that: something else holds the ready messages back for now (their
          // group's in-flight limit, a key's head in flight): look again shortly, not at the
          // poll interval's end.
          const tokenThere: boolean = Option.isSome(wait) && Duration.isZero(wait.value)
          // Nothing ready and no rate holding anything back: the backlog is drained. (An empty
          // claim under a rate is waiting for a token, not for a batch to fill: no linger.)
          drained = Option.isNone(wait)
          if (tokenThere && !tokenNow) {
            tokenNow = true
            continue
          }
          tokenNow = false
          busy = Option.isSome(wait)
          yield* Option.match(wait, {
            onNone: () => idleUntilSettled(settings.pollInterval),
            onSome: (d) =>
              idleFor(Duration.min(tokenThere ? heldBack : Duration.sum(d, tokenLag), settings.pollInterval))
          })
        } else {
          busy = true
          tokenNow = false
        }
      }
    })

    // The keeper (deadlines, lease renewals) runs until every loop is done.
    const keeper = yield* Effect.forkDetach(batches.keeper)
    const fiber = yield* Effect.forkDetach(
      Effect.all(Array.from({ length: Math.min(settings.batchesInFlight, CLAIM_LOOPS) }, () => loop), {
        concurrency: "unbounded",
        discard: true
      })
    )
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* Deferred.succeed(stop, undefined)
        // Finalizers run uninterruptibly; the wait must be interruptible for the deadline to cut it.
        // The loops stop claiming; the batches in flight finish, within the deadline.
        const finished = yield* Effect.interruptible(
          Effect.andThen(Fiber.await(fiber), FiberSet.awaitEmpty(delivering))
        ).pipe(Effect.timeout(settings.shutdownDeadline), Effect.option)
        if (Option.isNone(finished)) {
          yield* Fiber.interrupt(fiber)
          yield* FiberSet.clear(delivering)
        }
        yield* Fiber.interrupt(keeper)
        yield* batches.releaseInFlight
      })
    )
    return { wake: () => Queue.offerUnsafe(wake, undefined), counts: Ref.get(totals) }
  })
