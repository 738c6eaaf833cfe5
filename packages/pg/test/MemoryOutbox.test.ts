// The in-memory outbox keeps up with PostgreSQL's: cancellation and topic limits (in flight,
// per group, rates on the TestClock) with the same options, rules and typed errors; and the
// property net of Properties.test.ts over the queue's contract, run here against memory.
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as TestClock from "effect/testing/TestClock"
import * as FastCheck from "fast-check"
import * as Outbox from "../src/Outbox.js"
import * as OutboxMemory from "../src/OutboxMemory.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import {
  anything,
  duration,
  number,
  optionalBag,
  type QueueOperation,
  queueOperations,
  RUNS,
  text,
  TYPED
} from "./hostile.js"

const claim = (topics: ReadonlyArray<string>, limit = 10, worker = "w") =>
  Effect.flatMap(OutboxWorker.OutboxWorker, (w) => w.claim({ worker, topics, limit, lease: "30 seconds" }))

const enqueueAll = (topic: string, count: number, options: Outbox.EnqueueOptions = {}) =>
  Effect.flatMap(
    Outbox.Outbox,
    (o) => Effect.forEach(Array.from({ length: count }, (_, i) => i), (i) => o.enqueue(topic, { i }, options))
  )

const failureOf = <A, E>(exit: Exit.Exit<A, E>) =>
  Exit.isFailure(exit) ? Option.getOrUndefined(Cause.findErrorOption(exit.cause)) : undefined

describe("the in-memory outbox: cancellation", () => {
  it.effect("a cancelled message is never claimed, its key moves on, its holder's renewal and mark are refused as cancelled", () =>
    Effect.gen(function*() {
      const memory = yield* OutboxMemory.OutboxMemory
      const worker = yield* OutboxWorker.OutboxWorker
      const [first, second, third] = yield* enqueueAll("orders", 3, { orderingKey: "k" })
      const [held] = yield* claim(["orders"])
      expect(held!.id).toBe(first)
      const done = yield* memory.cancel([first!, third!, "999"], { reason: "order withdrawn", by: "ops" })
      // The unknown id is not named; the one being delivered is.
      expect(done).toEqual({ cancelled: [first, third], interrupted: [first] })
      const refused = yield* worker.renewLeases([held!.claim], "30 seconds")
      expect(refused.rejected).toMatchObject([{ _tag: "ClaimMismatch", cancelled: true }])
      expect(failureOf(yield* Effect.exit(worker.markProjected(held!.claim)))).toMatchObject({ cancelled: true })
      // The key's next message is its head now; the cancelled third never comes.
      expect((yield* claim(["orders"])).map((m) => m.id)).toEqual([second])
      const rows = yield* memory.rows
      expect(rows.find((row) => row.id === first)).toMatchObject({
        cancelledBy: "ops",
        projectedAt: null,
        lastError: "cancelled by ops: order withdrawn"
      })
      // Cancelling again changes nothing.
      expect(yield* memory.cancel([first!])).toEqual({ cancelled: [], interrupted: [] })
    }).pipe(Effect.provide(OutboxMemory.layer())))

  it.effect("bad ids, reasons and names are typed errors naming the argument; nothing changes", () =>
    Effect.gen(function*() {
      const memory = yield* OutboxMemory.OutboxMemory
      const [id] = yield* enqueueAll("t", 1)
      const before = yield* memory.rows
      for (
        const [call, argument] of [
          [memory.cancel(["not-an-id"]), "ids[0]"],
          [memory.cancel([id!], { reason: "x".repeat(501) }), "reason"],
          [memory.cancel([id!], { by: "" }), "by"]
        ] as const
      ) {
        expect(failureOf(yield* Effect.exit(call))).toMatchObject({ _tag: "InvalidInput", argument })
      }
      expect(yield* memory.rows).toEqual(before)
    }).pipe(Effect.provide(OutboxMemory.layer())))
})

describe("the in-memory outbox: limits", () => {
  it.effect("a topic's in-flight limit caps every claim; a mark or a lapsed lease gives its slot back", () =>
    Effect.gen(function*() {
      const memory = yield* OutboxMemory.OutboxMemory
      const worker = yield* OutboxWorker.OutboxWorker
      yield* memory.setLimit("mail", { maxInFlight: 2 })
      yield* enqueueAll("mail", 5)
      yield* enqueueAll("free", 3)
      const first = yield* claim(["mail", "free"])
      expect(first.filter((m) => m.topic === "mail")).toHaveLength(2)
      expect(first.filter((m) => m.topic === "free")).toHaveLength(3)
      expect(yield* claim(["mail"], 10, "other")).toEqual([])
      yield* worker.markProjected(first.find((m) => m.topic === "mail")!.claim)
      expect(yield* claim(["mail"], 10, "other")).toHaveLength(1)
      // Both holders' leases run out: two slots again.
      yield* TestClock.adjust("31 seconds")
      expect(yield* claim(["mail"], 10, "third")).toHaveLength(2)
      expect(yield* memory.clearLimit("mail")).toBe(true)
      expect(yield* memory.clearLimit("mail")).toBe(false)
    }).pipe(Effect.provide(OutboxMemory.layer())))

  it.effect("a topic at its limit leaves the claim to the others; messages without a group are not held by a group limit", () =>
    Effect.gen(function*() {
      const memory = yield* OutboxMemory.OutboxMemory
      const worker = yield* OutboxWorker.OutboxWorker
      yield* memory.setLimit("mail", { maxInFlight: 1, rate: { limit: 1, per: "1 minute", burst: 5 } })
      yield* enqueueAll("mail", 10)
      yield* enqueueAll("free", 3)
      // Ten mail messages are due first; the claim of 5 still takes the free ones.
      const claimed = yield* claim(["mail", "free"], 5)
      expect(claimed.map((m) => m.topic).sort()).toEqual(["free", "free", "free", "mail"])
      // At its in-flight limit the topic waits for a slot, not a token.
      expect(yield* worker.rateWait(["mail"])).toEqual(Option.none())
      yield* memory.setLimit("jobs", { groupMaxInFlight: 1 })
      yield* enqueueAll("jobs", 3)
      expect(yield* claim(["jobs"])).toHaveLength(3)
    }).pipe(Effect.provide(OutboxMemory.layer())))

  it.effect("enqueueMany refuses a dedup key as PostgreSQL does, and a claim that is not one is refused, typed", () =>
    Effect.gen(function*() {
      const memory = yield* OutboxMemory.OutboxMemory
      const worker = yield* OutboxWorker.OutboxWorker
      const outbox = yield* Outbox.Outbox
      const refused = yield* Effect.exit(
        outbox.enqueueMany([{ topic: "t", payload: 1 }, { topic: "t", payload: 2, options: { dedupKey: "k" } }])
      )
      expect(failureOf(refused)).toMatchObject({ _tag: "InvalidInput", argument: "dedupKey" })
      expect(yield* memory.rows).toEqual([])
      expect(failureOf(yield* Effect.exit(worker.markProjected(null as never)))).toMatchObject({
        _tag: "ClaimMismatch"
      })
      expect((yield* worker.renewLeases(["x" as never], "1 minute")).rejected).toMatchObject([{
        _tag: "ClaimMismatch"
      }])
    }).pipe(Effect.provide(OutboxMemory.layer())))

  it.effect("a changed rate keeps what its bucket earned at the old rate, at most the new burst", () =>
    Effect.gen(function*() {
      const memory = yield* OutboxMemory.OutboxMemory
      yield* memory.setLimit("r", { rate: { limit: 1, per: "1 second", burst: 1 } })
      yield* enqueueAll("r", 20)
      expect(yield* claim(["r"])).toHaveLength(1)
      // Ten seconds at 1/s earn a token (the old burst); the new rate does not pay for the past.
      yield* TestClock.adjust("10 seconds")
      yield* memory.setLimit("r", { rate: { limit: 100, per: "1 second", burst: 10 } })
      expect(yield* claim(["r"], 20)).toHaveLength(1)
    }).pipe(Effect.provide(OutboxMemory.layer())))

  it.effect("a group's limit caps each group; a keyed message held back holds back its key", () =>
    Effect.gen(function*() {
      const memory = yield* OutboxMemory.OutboxMemory
      yield* memory.setLimit("jobs", { groupMaxInFlight: 1 })
      yield* enqueueAll("jobs", 3, { group: "a", orderingKey: "ka" })
      yield* enqueueAll("jobs", 3, { group: "b" })
      const claimed = yield* claim(["jobs"])
      expect(claimed).toHaveLength(2)
      expect(new Set((yield* memory.rows).filter((row) => row.claimedBy !== null).map((row) => row.group))).toEqual(
        new Set(["a", "b"])
      )
    }).pipe(Effect.provide(OutboxMemory.layer())))

  it.effect("a rate: the burst at once, then one token per period's share; rateWait says when", () =>
    Effect.gen(function*() {
      const memory = yield* OutboxMemory.OutboxMemory
      const worker = yield* OutboxWorker.OutboxWorker
      yield* memory.setLimit("sms", { rate: { limit: 2, per: "1 second" } })
      yield* enqueueAll("sms", 10)
      expect(yield* claim(["sms"])).toHaveLength(2)
      expect(yield* claim(["sms"])).toHaveLength(0)
      expect(Option.map(yield* worker.rateWait(["sms"]), Duration.toMillis)).toEqual(Option.some(500))
      yield* TestClock.adjust("499 millis")
      expect(yield* claim(["sms"])).toHaveLength(0)
      yield* TestClock.adjust("1 millis")
      expect(yield* claim(["sms"])).toHaveLength(1)
      // A topic with no rate has nothing to wait for.
      expect(yield* worker.rateWait(["other"])).toEqual(Option.none())
    }).pipe(Effect.provide(OutboxMemory.layer())))

  it.effect("over any span d at most burst + limit × d / per are claimed (claims at random times)", () =>
    Effect.promise(() =>
      FastCheck.assert(
        FastCheck.asyncProperty(
          FastCheck.integer({ min: 1, max: 5 }),
          FastCheck.integer({ min: 1, max: 5 }),
          FastCheck.array(
            FastCheck.tuple(FastCheck.integer({ min: 0, max: 700 }), FastCheck.integer({ min: 1, max: 4 })),
            {
              minLength: 1,
              maxLength: 30
            }
          ),
          (limit, burst, steps) =>
            Effect.runPromise(
              Effect.gen(function*() {
                const memory = yield* OutboxMemory.OutboxMemory
                yield* memory.setLimit("r", { rate: { limit, per: "1 second", burst } })
                yield* enqueueAll("r", 200)
                const taken: Array<{ at: number; n: number }> = []
                let at = 0
                for (const [wait, size] of steps) {
                  yield* TestClock.adjust(wait)
                  at += wait
                  taken.push({ at, n: (yield* claim(["r"], size)).length })
                }
                for (const [i, from] of taken.entries()) {
                  for (const to of taken.slice(i)) {
                    const claimed = taken.filter((t) => t.at >= from.at && t.at <= to.at).reduce((a, t) => a + t.n, 0)
                    expect(claimed).toBeLessThanOrEqual(burst + (limit * (to.at - from.at)) / 1000 + 1e-9)
                  }
                }
              }).pipe(Effect.provide(OutboxMemory.layer()), Effect.provide(TestClock.layer()))
            )
        ),
        { numRuns: 50 }
      )
    ))

  it.effect("the options and rules of FlowControl.setLimit: a typo, a zero, a bad period are typed errors", () =>
    Effect.gen(function*() {
      const memory = yield* OutboxMemory.OutboxMemory
      for (
        const [options, argument] of [
          [{ maxInflight: 2 }, "options.maxInflight"],
          [{ maxInFlight: 0 }, "maxInFlight"],
          [{ rate: { limit: 1, per: "1.5 millis" } }, "rate.per"],
          [{ rate: { limit: 1, per: "8 days" } }, "rate.per"],
          [null, "options"]
        ] as const
      ) {
        expect(failureOf(yield* Effect.exit(memory.setLimit("t", options as never)))).toMatchObject({
          _tag: "InvalidInput",
          argument
        })
      }
    }).pipe(Effect.provide(OutboxMemory.layer())))
})

interface MemoryOperation {
  readonly name: string
  readonly run: Effect.Effect<unknown, unknown, Outbox.Outbox | OutboxWorker.OutboxWorker | OutboxMemory.OutboxMemory>
}

const rate = FastCheck.oneof(
  anything,
  FastCheck.record({ limit: number, per: duration, burst: optionalBag(anything) })
)

const memoryOperations = FastCheck.oneof<Array<FastCheck.Arbitrary<MemoryOperation | QueueOperation>>>(
  ...queueOperations,
  FastCheck.tuple(FastCheck.array(anything, { maxLength: 3 }), optionalBag(anything), optionalBag(anything)).map((
    [ids, reason, by]
  ) => ({
    name: "cancel",
    run: Effect.flatMap(OutboxMemory.OutboxMemory, (m) => m.cancel(ids as Array<string>, { reason, by } as never))
  })),
  FastCheck.tuple(text, optionalBag(anything), optionalBag(anything), optionalBag(rate), optionalBag(rate)).map((
    [topic, maxInFlight, groupMaxInFlight, topicRate, groupRate]
  ) => ({
    name: "setLimit",
    run: Effect.flatMap(
      OutboxMemory.OutboxMemory,
      (m) => m.setLimit(topic, { maxInFlight, groupMaxInFlight, rate: topicRate, groupRate } as never)
    )
  })),
  text.map((topic) => ({
    name: "clearLimit",
    run: Effect.flatMap(OutboxMemory.OutboxMemory, (m) => m.clearLimit(topic))
  })),
  optionalBag(anything).map((topics) => ({
    name: "rateWait",
    run: Effect.flatMap(OutboxWorker.OutboxWorker, (w) => w.rateWait(topics as never))
  }))
)

describe("every operation of the in-memory outbox, any argument", () => {
  it.effect("succeeds or fails typed, never a defect; a failure changes no message", () =>
    Effect.gen(function*() {
      const context = yield* Effect.context<Outbox.Outbox | OutboxWorker.OutboxWorker | OutboxMemory.OutboxMemory>()
      const check = (ops: ReadonlyArray<MemoryOperation>) =>
        Effect.runPromise(Effect.provide(
          Effect.gen(function*() {
            const memory = yield* OutboxMemory.OutboxMemory
            for (const op of ops) {
              const before = yield* memory.rows
              const exit = yield* Effect.exit(op.run)
              if (Exit.isFailure(exit)) {
                expect(Cause.hasDies(exit.cause), `${op.name} died: ${Cause.pretty(exit.cause)}`).toBe(false)
                const tag = (failureOf(exit) as { _tag?: string } | undefined)?._tag
                expect(TYPED.has(tag ?? ""), `${op.name} failed with ${tag}: ${Cause.pretty(exit.cause)}`).toBe(true)
                expect(yield* memory.rows, op.name).toEqual(before)
              }
            }
          }),
          context
        ))
      yield* Effect.promise(() =>
        FastCheck.assert(
          FastCheck.asyncProperty(FastCheck.array(memoryOperations, { minLength: 1, maxLength: 6 }), check),
          { numRuns: RUNS }
        )
      )
    }).pipe(Effect.provide(OutboxMemory.layer())))
})
