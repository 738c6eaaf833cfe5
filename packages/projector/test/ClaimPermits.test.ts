// The claim loops over an in-memory claim (no SQL in question here): what is claimed and not yet
// marked is bounded by message permits, each message gives its own back when its batch is done
// with it (marked, or the batch over), and a loop claims again once a full batch of them is free —
// a long publish holds its message, not a loop or the rest of its batch.
import { DatabaseError } from "@effect-durable/core/Errors"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Latch from "effect/Latch"
import * as TestClock from "effect/testing/TestClock"
import { noCounts } from "../src/internal/batches.js"
import { messagePermits, runLoops } from "../src/internal/loop.js"
import { decodeOptions } from "../src/internal/options.js"

describe("Projector: claim permits", () => {
  it.effect("claims stop when every permit is held by a message not done with; one done with frees its own permit, and a full batch of free permits is claimed at once", () =>
    Effect.gen(function*() {
      const settings = yield* decodeOptions({ batchSize: 4, batchesInFlight: 3, pollInterval: "1 hour" })
      expect(messagePermits(settings)).toBe(12)
      // Every claim takes a full batch; its messages are done with only when the test says.
      const endings: Array<(count: number) => void> = []
      // The deliveries themselves end with the test (shutdown waits for them on the TestClock).
      const end = yield* Latch.make(false)
      yield* runLoops(settings, {
        claimBatch: (onEnded) =>
          Effect.sync(() => {
            endings.push(onEnded)
            return { claimed: 4, deliver: Effect.as(end.await, noCounts) }
          }),
        rateWait: Effect.succeedNone,
        releaseInFlight: Effect.void,
        keeper: Effect.never,
        linger: Duration.zero
      })
      // Every timer the loops could have (the poll interval, a backoff) has fired after this.
      const settle = TestClock.adjust("3 hours")
      yield* settle
      // Three batches of 4 hold all 12: no fourth claim.
      expect(endings.length).toBe(3)
      // Three messages of the first batch are marked: 3 free, still no claim.
      endings[0]!(3)
      yield* settle
      expect(endings.length).toBe(3)
      // One of the second: 4 free, a full batch — claimed, though every batch still runs.
      endings[1]!(1)
      yield* settle
      expect(endings.length).toBe(4)
      // The fourth batch's four are marked at once: a batch's worth again, and one claim for it.
      endings[3]!(4)
      yield* settle
      expect(endings.length).toBe(5)
      yield* end.open
    }).pipe(Effect.scoped))

  it.effect("a batch whose settlement fails on the store backs the loops off, as a failed claim does: claims slow down on the store backoff, not at once", () =>
    Effect.gen(function*() {
      const settings = yield* decodeOptions({ batchSize: 4, batchesInFlight: 2, pollInterval: "1 hour" })
      // Every claim takes a full batch whose settlement fails at once (its marks refused).
      let claims = 0
      yield* runLoops(settings, {
        claimBatch: (onEnded) =>
          Effect.sync(() => {
            claims++
            return {
              claimed: 4,
              deliver: Effect.suspend(() => {
                onEnded(4)
                return Effect.fail(
                  new DatabaseError({
                    code: "42P01",
                    retryable: false,
                    operation: "test.mark",
                    detail: "marks refused"
                  })
                )
              })
            }
          }),
        rateWait: Effect.succeedNone,
        releaseInFlight: Effect.void,
        keeper: Effect.never,
        linger: Duration.zero
      })
      yield* TestClock.adjust("0 millis")
      // The two loops' first claims; then both wait out the backoff (its first step, jittered: 80 ms or more).
      expect(claims).toBe(2)
      yield* TestClock.adjust("50 millis")
      expect(claims).toBe(2)
      // Over ten seconds the exponential backoff (from 100 ms, doubling) allows a handful, not thousands.
      for (let step = 0; step < 1000; step++) yield* TestClock.adjust("10 millis")
      expect(claims).toBeGreaterThan(2)
      expect(claims).toBeLessThanOrEqual(20)
    }).pipe(Effect.scoped))

  it.effect("a claim that takes less than a batch gives the rest of its permits back at once", () =>
    Effect.gen(function*() {
      const settings = yield* decodeOptions({ batchSize: 4, batchesInFlight: 2, pollInterval: "1 hour" })
      expect(messagePermits(settings)).toBe(8)
      // One message per claim, never ending: each claim takes a batch of permits and gives three
      // back at once. After five, three are free — less than a batch: the loops wait, woken or not.
      let claims = 0
      const end = yield* Latch.make(false)
      const loops = yield* runLoops(settings, {
        claimBatch: () =>
          Effect.sync(() => {
            claims++
            return { claimed: 1, deliver: Effect.as(end.await, noCounts) }
          }),
        rateWait: Effect.succeedNone,
        releaseInFlight: Effect.void,
        keeper: Effect.never,
        linger: Duration.zero
      })
      for (let wakes = 0; wakes < 6; wakes++) {
        loops.wake()
        yield* TestClock.adjust("3 hours")
      }
      expect(claims).toBe(5)
      yield* end.open
    }).pipe(Effect.scoped))

  it.effect("a batch's settlement wakes an idle loop: what a limit held back is claimed at once, not at the poll interval", () =>
    Effect.gen(function*() {
      const settings = yield* decodeOptions({ batchSize: 4, batchesInFlight: 2, pollInterval: "1 hour" })
      // A store that holds 6 messages back to 2 in flight at a time (a topic limit of 2).
      let waiting = 6
      let inFlight = 0
      const delivered = yield* Deferred.make<void>()
      // Each batch is delivered only once a claim has come back empty (the loops gone idle), as
      // deliveries that take longer than a claim are.
      let idle = Deferred.makeUnsafe<void>()
      yield* runLoops(settings, {
        claimBatch: (onEnded) =>
          Effect.sync(() => {
            const claimed = Math.min(2 - inFlight, waiting)
            waiting -= claimed
            inFlight += claimed
            const after = idle
            if (claimed === 0) {
              Deferred.doneUnsafe(idle, Exit.void)
              idle = Deferred.makeUnsafe<void>()
            }
            return {
              claimed,
              deliver: Effect.andThen(
                Deferred.await(after),
                Effect.sync(() => {
                  inFlight -= claimed
                  onEnded(claimed)
                  if (waiting === 0 && inFlight === 0) Deferred.doneUnsafe(delivered, Exit.void)
                  return noCounts
                })
              )
            }
          }),
        rateWait: Effect.succeedNone,
        releaseInFlight: Effect.void,
        keeper: Effect.never,
        linger: Duration.zero
      })
      // The TestClock never moves: no poll interval passes, only the settlements wake the loops.
      yield* Deferred.await(delivered).pipe(Effect.timeout("20 seconds"), TestClock.withLive)
      expect([waiting, inFlight]).toEqual([0, 0])
    }).pipe(Effect.scoped))
})
