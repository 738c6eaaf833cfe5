import { DurableConfigError } from "@effect-durable/core/Errors"
import * as Outbox from "@effect-durable/pg/Outbox"
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import { describe, expect, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as TestClock from "effect/testing/TestClock"
import * as FastCheck from "fast-check"
import { noCounts } from "../src/internal/batches.js"
import { runLoops } from "../src/internal/loop.js"
import { decodeOptions } from "../src/internal/options.js"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import { eventually, freshName, outboxRows, projectedCount, substrate, withLayerLive } from "./support.js"

type Message = OutboxWorker.OutboxMessage

/** Every call a batch handler got, as the messages it was given. */
const recordingCalls = (
  options: Publisher.BatchOptions,
  behaviour: (
    messages: ReadonlyArray<Message>
  ) => Effect.Effect<void | Publisher.BatchOutcome, Publisher.PublishError> = () => Effect.void
) => {
  const calls: Array<ReadonlyArray<Message>> = []
  const layer = Publisher.layerBatchHandler(
    options,
    (messages) => Effect.andThen(Effect.sync(() => calls.push(messages)), Effect.suspend(() => behaviour(messages)))
  )
  return { calls, layer }
}

/**
 * Claims over no database: each stamped with its time on the clock, of the scripted sizes (then
 * empty); a batch's delivery ends its messages at once.
 */
const scriptedClaims = (sizes: ReadonlyArray<number>, claimedAt: Array<number>) => (onEnded: (count: number) => void) =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    claimedAt.push(now)
    const claimed = sizes[claimedAt.length - 1] ?? 0
    return claimed === 0 ? undefined : {
      claimed,
      deliver: Effect.sync(() => {
        onEnded(claimed)
        return { ...noCounts, claimed }
      })
    }
  })

const seqOf = (message: Message) => (message.payload as { readonly seq: number }).seq

describe("Projector: batch handlers", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("hands each topic's messages over in calls of at most maxSize, one topic per call, each message once", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topics = [freshName("batch-a"), freshName("batch-b")] as const
        const ids = yield* outbox.enqueueMany(
          Array.from({ length: 250 }, (_, seq) => ({ topic: topics[seq % 2]!, payload: { seq } }))
        )
        const { calls, layer } = recordingCalls({ maxSize: 100 })
        const counts = yield* Projector.drain({ topics: [...topics] }).pipe(Effect.provide(layer), TestClock.withLive)
        expect(counts).toMatchObject({ claimed: 250, delivered: 250, retried: 0, dead: 0 })
        expect(calls.map((call) => call.length).sort((a, b) => a - b)).toEqual([25, 25, 100, 100])
        for (const call of calls) expect(new Set(call.map((message) => message.topic)).size).toBe(1)
        expect(calls.flat().map((message) => message.id).sort()).toEqual([...ids].sort())
        expect(yield* projectedCount(ids)).toBe(250)
      }))

    it.effect("a batch fills to maxSize even beyond the projector's batch size", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshName("batch-size")
        yield* outbox.enqueueMany(Array.from({ length: 120 }, (_, seq) => ({ topic, payload: { seq } })))
        const { calls, layer } = recordingCalls({ maxSize: 120 })
        yield* Projector.drain({ topics: [topic], batchSize: 50 }).pipe(Effect.provide(layer), TestClock.withLive)
        expect(calls.map((call) => call.length)).toEqual([120])
      }))

    it.effect("per-message outcomes: the named messages are retried or dead, the rest delivered and marked once", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshName("batch-partial")
        const ids = yield* outbox.enqueueMany(Array.from({ length: 30 }, (_, seq) => ({ topic, payload: { seq } })))
        const { layer } = recordingCalls(
          { maxSize: 30 },
          (messages) =>
            Effect.succeed(Publisher.failedIn(messages.flatMap((message) =>
              seqOf(message) % 10 === 3
                ? [[message, Publisher.retryable("gateway busy")] as const]
                : seqOf(message) % 10 === 7
                ? [[message, Publisher.permanent("no such customer")] as const]
                : []
            )))
        )
        const counts = yield* Projector.drain({ topics: [topic], backoff: { min: "1 hour", max: "2 hours" } }).pipe(
          Effect.provide(layer),
          TestClock.withLive
        )
        expect(counts).toMatchObject({ claimed: 30, delivered: 24, retried: 3, dead: 3 })
        const rows = yield* outboxRows(ids)
        for (const [seq, row] of rows.entries()) {
          if (seq % 10 === 3) {
            expect(row).toMatchObject({ projected: false, dead: false, attempt_count: 1, last_error: "gateway busy" })
          } else if (seq % 10 === 7) {
            expect(row).toMatchObject({ dead: true, last_error: expect.stringContaining("no such customer") })
          } else expect(row).toMatchObject({ projected: true, dead: false })
        }
      }))

    it.effect("a failed call fails every message in it; each is retried and delivered by a later call", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshName("batch-whole")
        const ids = yield* outbox.enqueueMany(Array.from({ length: 10 }, (_, seq) => ({ topic, payload: { seq } })))
        const { calls, layer } = recordingCalls(
          { maxSize: 10 },
          () => calls.length === 1 ? Effect.fail(Publisher.retryable("search index unavailable")) : Effect.void
        )
        yield* withLayerLive(
          Projector.layer({ topics: [topic], pollInterval: "20 millis", backoff: { min: "1 millis", max: "2 millis" } })
            .pipe(Layer.provide(layer)),
          eventually(projectedCount(ids), (n) => n === ids.length)
        )
        expect(calls[0]!.map((message) => message.id)).toEqual(ids)
        // The retries may come back over more than one claim (each its own backoff).
        expect(calls.slice(1).flat().map((message) => message.id).sort()).toEqual([...ids].sort())
        expect((yield* outboxRows(ids)).map((row) => row.attempt_count)).toEqual(Array(10).fill(2))
      }))

    it.effect("a call past the delivery timeout is cut: none marked, each retried (a key's later messages held back behind its first)", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshName("batch-timeout")
        // Four of one key, four without.
        const ids = yield* outbox.enqueueMany(
          Array.from({ length: 8 }, (_, seq) => ({
            topic,
            payload: { seq },
            ...(seq < 4 ? { options: { orderingKey: `${topic}-k` } } : {})
          }))
        )
        // A call holding a message seen for the first time hangs; the keeper cuts it at the deadline.
        // (The claim may split the eight over two loops, so which call holds which is not fixed.)
        const seen = new Set<string>()
        const { calls, layer } = recordingCalls({ maxSize: 8 }, (messages) => {
          const fresh = messages.some((message) => !seen.has(message.id))
          for (const message of messages) seen.add(message.id)
          return fresh ? Effect.never : Effect.void
        })
        yield* withLayerLive(
          Projector.layer({
            topics: [topic],
            pollInterval: "20 millis",
            deliveryTimeout: "300 millis",
            backoff: { min: "1 millis", max: "2 millis" }
          }).pipe(Layer.provide(layer)),
          eventually(projectedCount(ids), (n) => n === ids.length)
        )
        // Each message came twice: once in a cut call, once in the call that delivered it; the key's
        // run was never split between calls.
        expect(calls.flat().map((message) => message.id).sort()).toEqual([...ids, ...ids].sort())
        for (const call of calls) {
          const keyed = call.filter((message) => ids.indexOf(message.id) < 4).map((message) => message.id)
          expect(keyed).toEqual(keyed.length === 0 ? [] : ids.slice(0, 4))
        }
        // The key's first message failed with the cut call; the rest of the key was held back
        // (no attempt counted against them), the unkeyed ones failed each.
        expect((yield* outboxRows(ids)).map((row) => row.attempt_count)).toEqual([2, 1, 1, 1, 2, 2, 2, 2])
      }))

    it.effect("a key's messages come in order in one call; those after a failed one are not marked and come again after it", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshName("batch-keys")
        const ids = yield* outbox.enqueueMany([
          ...Array.from({ length: 5 }, (_, seq) => ({ topic, payload: { seq }, options: { orderingKey: "k1" } })),
          ...Array.from(
            { length: 5 },
            (_, seq) => ({ topic, payload: { seq: 10 + seq }, options: { orderingKey: "k2" } })
          )
        ])
        let failSeq1 = true
        // The order in which each key's messages were reported delivered (what a consumer saw take effect).
        const applied: Record<string, Array<number>> = { k1: [], k2: [] }
        const { calls, layer } = recordingCalls({ maxSize: 100 }, (messages) =>
          Effect.sync(() => {
            const failed = messages.filter((message) => failSeq1 && seqOf(message) === 1)
            if (failed.length > 0) failSeq1 = false
            const keys = new Set<string>()
            for (const message of messages) {
              const key = message.orderingKey!
              if (failed.includes(message)) keys.add(key)
              if (!keys.has(key)) applied[key]!.push(seqOf(message))
            }
            return Publisher.failedIn(failed.map((message) => [message, Publisher.retryable("flaky")] as const))
          }))
        yield* withLayerLive(
          Projector.layer({ topics: [topic], pollInterval: "20 millis", backoff: { min: "1 millis", max: "2 millis" } })
            .pipe(Layer.provide(layer)),
          eventually(projectedCount(ids), (n) => n === ids.length)
        )
        // Each key's first call had the key whole and in order (two batches in flight may have
        // claimed the two keys apart).
        const firstCallOf = (key: string) => calls.find((call) => call.some((m) => m.orderingKey === key))!
        expect(firstCallOf("k1").filter((m) => m.orderingKey === "k1").map(seqOf)).toEqual([0, 1, 2, 3, 4])
        expect(firstCallOf("k2").filter((m) => m.orderingKey === "k2").map(seqOf)).toEqual([10, 11, 12, 13, 14])
        expect(applied).toEqual({ k1: [0, 1, 2, 3, 4], k2: [10, 11, 12, 13, 14] })
        const rows = yield* outboxRows(ids)
        // Held back behind the failure: given back without an attempt counted against them.
        expect(rows.map((row) => row.attempt_count)).toEqual([1, 2, 1, 1, 1, 1, 1, 1, 1, 1])
      }))

    it.effect("a key shared by two topics: each call holds one topic, the key's order kept", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const [a, b] = [freshName("batch-ta"), freshName("batch-tb")]
        const key = `${a}-shared`
        const ids = yield* outbox.enqueueMany(
          [a, a, b, b].map((topic, seq) => ({ topic, payload: { seq }, options: { orderingKey: key } }))
        )
        const { calls, layer } = recordingCalls({ maxSize: 10 })
        yield* withLayerLive(
          Projector.layer({ topics: [a, b], pollInterval: "20 millis" }).pipe(Layer.provide(layer)),
          eventually(projectedCount(ids), (n) => n === ids.length)
        )
        for (const call of calls) expect(new Set(call.map((m) => m.topic)).size).toBe(1)
        expect(calls.flat().map(seqOf)).toEqual([0, 1, 2, 3])
      }))

    it.effect("a key's backlog beyond maxSize comes in calls of maxSize, in order, one call of the key at a time", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshName("batch-run")
        const ids = yield* outbox.enqueueMany(
          Array.from({ length: 250 }, (_, seq) => ({ topic, payload: { seq }, options: { orderingKey: "customer-9" } }))
        )
        let inFlight = 0
        let most = 0
        const { calls, layer } = recordingCalls({ maxSize: 100 }, () =>
          Effect.gen(function*() {
            most = Math.max(most, ++inFlight)
            yield* Effect.yieldNow
            inFlight--
          }))
        yield* withLayerLive(
          Projector.layer({ topics: [topic], batchesInFlight: 3, pollInterval: "20 millis" }).pipe(
            Layer.provide(layer)
          ),
          eventually(projectedCount(ids), (n) => n === ids.length)
        )
        expect(calls.map((call) => call.length)).toEqual([100, 100, 50])
        expect(calls.flat().map(seqOf)).toEqual(Array.from({ length: 250 }, (_, seq) => seq))
        expect(most).toBe(1)
      }))
  })

  it.effect("a bad option is a DurableConfigError naming it; every maxSize from 1 to 1000 is taken", () =>
    Effect.gen(function*() {
      const build = (options: Publisher.BatchOptions) =>
        Effect.exit(Layer.build(Publisher.layerBatchHandler(options, () => Effect.void)).pipe(Effect.scoped))
      const refused = (exit: Exit.Exit<unknown, DurableConfigError>) =>
        Exit.isFailure(exit) &&
        exit.cause.reasons.some((reason) => reason._tag === "Fail" && reason.error instanceof DurableConfigError)
      yield* Effect.promise(() =>
        FastCheck.assert(
          FastCheck.asyncProperty(
            FastCheck.oneof(FastCheck.integer({ min: -5, max: 2000 }), FastCheck.double()),
            async (maxSize) => {
              const exit = await Effect.runPromise(build({ maxSize }))
              const valid = Number.isInteger(maxSize) && maxSize >= 1 && maxSize <= 1000
              expect(Exit.isSuccess(exit)).toBe(valid)
              if (!valid) expect(refused(exit)).toBe(true)
            }
          ),
          { numRuns: 200 }
        )
      )
      const tooLong = yield* build({ maxSize: 10, maxWait: "2 hours" })
      expect(Exit.isFailure(tooLong) && String(tooLong.cause)).toContain("maxWait")
      const zero = yield* Effect.flip(
        Effect.scoped(Layer.build(Publisher.layerBatchHandler({ maxSize: 0 }, () => Effect.void)))
      )
      expect(zero.field).toBe("maxSize")
      expect(zero.rule).toContain("1 to 1000")
    }))

  it.effect("a batch handler as a single publisher: its failure for the message is the publish's", () =>
    Effect.gen(function*() {
      const publisher = yield* Publisher.Publisher.pipe(
        Effect.provide(
          Publisher.layerBatchHandler(
            { maxSize: 5 },
            (messages) => Effect.succeed(Publisher.failedIn([[messages[0], Publisher.permanent("refused")]]))
          )
        )
      )
      const error = yield* Effect.flip(publisher.publish({ id: "1" } as Message))
      expect(error.reason).toBe("refused")
      expect(publisher.batch?.maxWait).toEqual(Duration.zero)
    }))

  it.effect("maxWait: a loop woken after an empty claim waits it out before claiming; a backlog is claimed without waiting", () =>
    Effect.gen(function*() {
      // The loop over an in-memory claim (no SQL in question here): each claim's time on the
      // TestClock, and scripted sizes (10 is a full batch).
      const settings = yield* decodeOptions({ batchSize: 10, batchesInFlight: 1, pollInterval: "1 hour" })
      const sizes = [0, 3, 0, 10, 10, 4, 0]
      const claimedAt: Array<number> = []
      const loops = yield* runLoops(settings, {
        claimBatch: scriptedClaims(sizes, claimedAt),
        rateWait: Effect.succeedNone,
        releaseInFlight: Effect.void,
        keeper: Effect.never,
        linger: Duration.millis(200)
      })
      const until = (n: number) =>
        Effect.gen(function*() {
          // The clock moves only here, in steps of 10 ms: a claim made after a 200 ms linger
          // is stamped 200 ms after its wake, one made at once is stamped with the wake's time.
          for (let step = 0; claimedAt.length < n && step < 1000; step++) yield* TestClock.adjust("10 millis")
        })
      yield* until(1)
      expect(claimedAt).toEqual([0])
      // Woken after the empty claim: lingers 200 ms, then claims 3 and, at once, the empty claim after it.
      const woken = yield* Clock.currentTimeMillis
      loops.wake()
      yield* until(3)
      // (The loop may hear the wake only after the first 10 ms step.)
      expect(claimedAt[1]! - woken).toBeGreaterThanOrEqual(200)
      expect(claimedAt[1]! - woken).toBeLessThanOrEqual(210)
      expect(claimedAt[2]).toBe(claimedAt[1])
      // Woken again: lingers, then a backlog (full batches) is claimed without lingering between claims.
      const again = yield* Clock.currentTimeMillis
      loops.wake()
      yield* until(7)
      expect(claimedAt[3]! - again).toBeGreaterThanOrEqual(200)
      expect(claimedAt[3]! - again).toBeLessThanOrEqual(210)
      expect(claimedAt.slice(4)).toEqual(Array(3).fill(claimedAt[3]))
    }).pipe(Effect.scoped))

  it.effect("maxWait: an empty claim under a rate waits for the token, not for the batch to fill", () =>
    Effect.gen(function*() {
      const settings = yield* decodeOptions({ batchSize: 10, batchesInFlight: 1, pollInterval: "1 hour" })
      const sizes = [4, 0, 3]
      const claimedAt: Array<number> = []
      yield* runLoops(settings, {
        claimBatch: scriptedClaims(sizes, claimedAt),
        // A rate holds the topic back: its next token in 50 ms.
        rateWait: Effect.succeed(Option.some(Duration.millis(50))),
        releaseInFlight: Effect.void,
        keeper: Effect.never,
        linger: Duration.seconds(10)
      })
      for (let step = 0; claimedAt.length < 3 && step < 1000; step++) yield* TestClock.adjust("10 millis")
      // After the empty claim: the token's wait (50 ms and a millisecond), not the 10 s linger.
      expect(claimedAt[2]! - claimedAt[1]!).toBeGreaterThanOrEqual(51)
      expect(claimedAt[2]! - claimedAt[1]!).toBeLessThanOrEqual(70)
    }).pipe(Effect.scoped))
})
