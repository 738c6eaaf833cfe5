// The projector's time-driven logic on TestClock, over the in-memory outbox (the PostgreSQL
// queue's claims, fences and leases, on Effect's Clock): lease renewal, the delivery
// deadline, marks while a batch runs, the shutdown deadline. Minutes of projector time in
// milliseconds; the suites on PostgreSQL keep what only PostgreSQL shows (locks, commits, crashes).
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxMemory from "@effect-durable/pg/OutboxMemory"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import { describe, expect, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as TestClock from "effect/testing/TestClock"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"

/** Moves the TestClock `millis` forward in small steps, letting every fiber run between them. */
const advance = (millis: number, step = 50) =>
  Effect.forEach(Array.from({ length: Math.ceil(millis / step) }), () => TestClock.adjust(step), { discard: true })

/** Advances until `condition` holds (at most `millis` of test time). */
const advanceUntil = <E, R>(condition: Effect.Effect<boolean, E, R>, millis = 60_000, step = 50) =>
  Effect.gen(function*() {
    for (let spent = 0; spent <= millis; spent += step) {
      if (yield* condition) return
      yield* TestClock.adjust(step)
    }
    return yield* Effect.die(new Error(`not reached in ${millis} ms of test time`))
  })

const rowOf = (id: string) =>
  Effect.map(OutboxMemory.OutboxMemory, (memory) => memory.rows).pipe(
    Effect.flatten,
    Effect.map((rows) => rows.find((row) => row.id === id)!)
  )

/** The projector built into a scope the test closes itself (to watch the shutdown). */
const startProjector = (options: Projector.ProjectorOptions, publish: Publisher.Publish) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(
      Projector.layer(options).pipe(Layer.provide(Publisher.layerHandler(publish))),
      scope
    )
    return { scope, context }
  })

describe("the projector on TestClock (in-memory outbox)", () => {
  it.layer(OutboxMemory.layer())((it) => {
    it.effect("a slow delivery keeps its lease by renewal: past several leases no other worker can claim it", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const id = yield* outbox.enqueue("slow", {})
        const started = yield* Deferred.make<void>()
        const finish = yield* Deferred.make<void>()
        const { scope } = yield* startProjector(
          {
            topics: ["slow"],
            lease: "3 seconds",
            deliveryTimeout: "1 minute",
            pollInterval: "1 second",
            workerId: "slow-a"
          },
          () => Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(finish))
        )
        yield* advanceUntil(Deferred.isDone(started))
        const first = yield* rowOf(id)
        // Four leases later the row is still held by the first claim, its lease ahead of the clock.
        for (let lease = 0; lease < 4; lease++) {
          yield* advance(3_000)
          const row = yield* rowOf(id)
          expect(row).toMatchObject({ claimedBy: "slow-a", generation: first.generation })
          expect(row.claimedUntil!).toBeGreaterThan(yield* Clock.currentTimeMillis)
          expect(yield* worker.claim({ worker: "slow-b", topics: ["slow"], limit: 10, lease: "1 minute" })).toEqual([])
        }
        yield* Deferred.succeed(finish, undefined)
        yield* advanceUntil(Effect.map(rowOf(id), (row) => row.projectedAt !== null))
        expect(yield* rowOf(id)).toMatchObject({ attempts: 1, generation: 1, failureCount: 0 })
        yield* Scope.close(scope, Exit.void)
      }))

    /**
     * A worker whose first claim that takes something returns `millis` of the clock after the
     * claim ran (its leases running from then): a claim slowed by a loaded machine or a lock.
     */
    const slowClaim = (worker: OutboxWorker.OutboxWorker["Service"], millis: number) => {
      let slowed = false
      return OutboxWorker.OutboxWorker.of({
        ...worker,
        claim: (options) =>
          Effect.tap(worker.claim(options), (claimed) => {
            if (slowed || claimed.length === 0) return Effect.void
            slowed = true
            return Effect.sleep(millis)
          })
      })
    }

    it.effect("a claim that came back late is renewed at once: its lease never lapses under the delivery", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const id = yield* outbox.enqueue("late", {})
        const started = yield* Deferred.make<void>()
        const finish = yield* Deferred.make<void>()
        // 2.2 s of a 3 s lease spent before the rows come back; renewals every second.
        const { scope } = yield* startProjector(
          { topics: ["late"], lease: "3 seconds", deliveryTimeout: "1 minute", pollInterval: "1 second" },
          () => Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(finish))
        ).pipe(Effect.provideService(OutboxWorker.OutboxWorker, slowClaim(worker, 2_200)))
        yield* advanceUntil(Deferred.isDone(started))
        const claimed = yield* rowOf(id)
        // Past the lease the claim took: renewed (a third of a lease after the rows came back,
        // as before, it would have lapsed at 3 s and been renewed only at 3.2 s).
        yield* advance(claimed.claimedUntil! - (yield* Clock.currentTimeMillis) + 100)
        const row = yield* rowOf(id)
        expect(row).toMatchObject({ claimedBy: claimed.claimedBy, generation: claimed.generation })
        expect(row.claimedUntil!).toBeGreaterThan(yield* Clock.currentTimeMillis)
        expect(yield* worker.claim({ worker: "rival", topics: ["late"], limit: 10, lease: "1 minute" })).toEqual([])
        yield* Deferred.succeed(finish, undefined)
        yield* advanceUntil(Effect.map(rowOf(id), (row) => row.projectedAt !== null))
        expect(yield* rowOf(id)).toMatchObject({ attempts: 1, generation: claimed.generation })
        yield* Scope.close(scope, Exit.void)
      }))

    it.effect("a claim that came back after its lease ran out publishes nothing: the messages are its new holder's", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const ids = yield* outbox.enqueueMany([0, 1, 2].map((i) => ({ topic: "lapsed", payload: { i } })))
        const published: Array<string> = []
        const projector = yield* Effect.forkChild(
          startProjector(
            // One batch loop: the one slowed is the projector's only claimer.
            {
              topics: ["lapsed"],
              lease: "3 seconds",
              deliveryTimeout: "1 minute",
              pollInterval: "1 second",
              batchesInFlight: 1
            },
            (message) => Effect.sync(() => void published.push(message.id))
          ).pipe(Effect.provideService(OutboxWorker.OutboxWorker, slowClaim(worker, 5_000)))
        )
        // The projector's claim has run (its rows leased) and is on its way back.
        yield* advanceUntil(Effect.map(rowOf(ids[0]!), (row) => row.claimedUntil !== null))
        const first = yield* rowOf(ids[0]!)
        // Its lease runs out before the rows come back, and another worker takes them.
        yield* advance(first.claimedUntil! - (yield* Clock.currentTimeMillis) + 100)
        const rival = yield* worker.claim({ worker: "rival", topics: ["lapsed"], limit: 10, lease: "1 minute" })
        expect(rival.map((m) => m.id)).toEqual(ids)
        const { scope } = yield* Fiber.join(projector)
        yield* advance(5_000)
        // The projector's rows came back 2 s after their lease ran out: none was published.
        expect(published).toEqual([])
        for (const message of rival) yield* worker.markProjected(message.claim)
        expect((yield* Effect.forEach(ids, rowOf)).map((row) => row.generation)).toEqual(
          ids.map(() => first.generation + 1)
        )
        yield* Scope.close(scope, Exit.void)
      }))

    it.effect("the lanes time a batch's leases on the projector's clock, not on one the publisher's context carries", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const id = yield* outbox.enqueue("skewed", {})
        // The publisher's layer was built with a clock an hour ahead: read by the lanes, every
        // lease would look long gone and nothing would ever start.
        const base = yield* Clock.clockWith(Effect.succeed)
        const HOUR = 3_600_000
        const ahead: Clock.Clock = {
          currentTimeMillisUnsafe: () => base.currentTimeMillisUnsafe() + HOUR,
          currentTimeMillis: Effect.map(base.currentTimeMillis, (millis) => millis + HOUR),
          currentTimeNanosUnsafe: () => base.currentTimeNanosUnsafe() + BigInt(HOUR) * 1_000_000n,
          currentTimeNanos: Effect.map(base.currentTimeNanos, (nanos) => nanos + BigInt(HOUR) * 1_000_000n),
          monotonicTimeNanosUnsafe: () => base.monotonicTimeNanosUnsafe(),
          monotonicTimeNanos: base.monotonicTimeNanos,
          sleep: (duration) => base.sleep(duration)
        }
        const delivered = yield* Deferred.make<void>()
        const scope = yield* Scope.make()
        yield* Layer.buildWithScope(
          Projector.layer({ topics: ["skewed"], lease: "3 seconds", pollInterval: "1 second" }).pipe(
            Layer.provide(
              Publisher.layerHandler(() => Deferred.succeed(delivered, undefined)).pipe(
                Layer.provide(Layer.succeed(Clock.Clock, ahead))
              )
            )
          ),
          scope
        )
        yield* advanceUntil(Deferred.isDone(delivered), 10_000)
        yield* advanceUntil(Effect.map(rowOf(id), (row) => row.projectedAt !== null))
        expect(yield* rowOf(id)).toMatchObject({ attempts: 1, failureCount: 0 })
        yield* Scope.close(scope, Exit.void)
      }))

    it.effect("a delivery past its deadline is cut and released for a retry, its lane moving on", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const [stuck, next] = [
          yield* outbox.enqueue("deadline", { stuck: true }),
          yield* outbox.enqueue("deadline", {})
        ]
        const interrupted = yield* Deferred.make<void>()
        const { scope } = yield* startProjector(
          {
            topics: ["deadline"],
            concurrency: 1,
            deliveryTimeout: "2 seconds",
            pollInterval: "1 second",
            backoff: { min: "1 minute" }
          },
          (message) =>
            (message.payload as { stuck?: boolean }).stuck === true
              ? Effect.onInterrupt(Effect.never, () => Deferred.succeed(interrupted, undefined))
              : Effect.void
        )
        yield* advanceUntil(Effect.map(rowOf(next), (row) => row.projectedAt !== null), 10_000)
        // The handler saw the interruption; the message is released, retryable, not dead.
        expect(yield* Deferred.isDone(interrupted)).toBe(true)
        const row = yield* rowOf(stuck)
        expect(row).toMatchObject({ failureCount: 1, deadAt: null, claimedUntil: null, projectedAt: null })
        expect(row.lastError).toMatch(/timed out after 2s/)
        expect(row.availableAt).toBeGreaterThan(yield* Clock.currentTimeMillis)
        yield* Scope.close(scope, Exit.void)
      }))

    it.effect("the successes of a batch are marked while its slowest delivery runs, none delivered twice", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const ids = yield* outbox.enqueueMany(Array.from({ length: 6 }, (_, i) => ({ topic: "tail", payload: { i } })))
        const held = yield* Deferred.make<void>()
        const deliveries = new Map<string, number>()
        const { scope } = yield* startProjector(
          {
            topics: ["tail"],
            batchSize: 6,
            concurrency: 2,
            lease: "3 seconds",
            deliveryTimeout: "1 minute",
            pollInterval: "1 second"
          },
          (message) =>
            Effect.andThen(
              Effect.sync(() => void deliveries.set(message.id, (deliveries.get(message.id) ?? 0) + 1)),
              (message.payload as { i: number }).i === 5 ? Deferred.await(held) : Effect.void
            )
        )
        const marked = Effect.flatMap(
          OutboxMemory.OutboxMemory,
          (memory) =>
            Effect.map(
              memory.rows,
              (rows) => rows.filter((row) => ids.includes(row.id) && row.projectedAt !== null).length
            )
        )
        // Marked within a second (a third of the lease, at most a second), the sixth still running.
        yield* advanceUntil(Effect.map(marked, (n) => n === 5), 2_000)
        // Three leases on: the sixth is held by its first claim, the five were not claimed again.
        yield* advance(9_000)
        expect(yield* rowOf(ids[5]!)).toMatchObject({ generation: 1, projectedAt: null })
        expect((yield* rowOf(ids[5]!)).claimedUntil!).toBeGreaterThan(yield* Clock.currentTimeMillis)
        yield* Deferred.succeed(held, undefined)
        yield* advanceUntil(Effect.map(marked, (n) => n === 6), 5_000)
        expect([...deliveries.values()]).toEqual([1, 1, 1, 1, 1, 1])
        yield* Scope.close(scope, Exit.void)
      }))

    it.effect("closing waits for an in-flight delivery up to the shutdown deadline, then gives it back, counting nothing", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const id = yield* outbox.enqueue("shutdown", {})
        const started = yield* Deferred.make<void>()
        const { scope } = yield* startProjector(
          {
            topics: ["shutdown"],
            shutdownDeadline: "5 seconds",
            deliveryTimeout: "1 minute",
            pollInterval: "1 second"
          },
          () => Effect.andThen(Deferred.succeed(started, undefined), Effect.never)
        )
        yield* advanceUntil(Deferred.isDone(started))
        const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void), { startImmediately: true })
        // Within the deadline it still waits for the delivery.
        yield* advance(4_000)
        expect(closing.pollUnsafe()).toBeUndefined()
        yield* advance(2_000)
        yield* Fiber.join(closing)
        // Given back: claimable again at once, no failure, no lost lease.
        expect(yield* rowOf(id)).toMatchObject({
          claimedUntil: null,
          failureCount: 0,
          leaseExpiries: 0,
          projectedAt: null
        })
      }))

    it.effect("a message cancelled while delivered: its delivery is stopped at the next renewal, counted cancelled, never marked", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const memory = yield* OutboxMemory.OutboxMemory
        const id = yield* outbox.enqueue("withdrawn", {})
        const started = yield* Deferred.make<void>()
        const stopped = yield* Deferred.make<void>()
        const { context, scope } = yield* startProjector(
          { topics: ["withdrawn"], lease: "3 seconds", deliveryTimeout: "1 minute", pollInterval: "1 second" },
          () =>
            Effect.andThen(Deferred.succeed(started, undefined), Effect.never).pipe(
              Effect.onInterrupt(() => Deferred.succeed(stopped, undefined))
            )
        )
        yield* advanceUntil(Deferred.isDone(started))
        expect(yield* memory.cancel([id], { reason: "order withdrawn" })).toEqual({
          cancelled: [id],
          interrupted: [id]
        })
        // Renewals run every third of the lease: within one lease the delivery is stopped.
        yield* advanceUntil(Deferred.isDone(stopped), 3_000)
        const projector = Context.get(context, Projector.Projector)
        yield* advanceUntil(Effect.map(projector.counts, (counts) => counts.cancelled === 1), 3_000)
        expect(yield* rowOf(id)).toMatchObject({ projectedAt: null, cancelledBy: "an operator", generation: 1 })
        yield* Scope.close(scope, Exit.void)
      }))
  })
})
