import * as Durable from "@effect-durable/pg/Durable"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import { APPLICATION_NAME } from "@effect-durable/pg/Notifications"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Faults from "@effect-durable/testing/Faults"
import * as Telemetry from "@effect-durable/testing/Telemetry"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { describe, expect, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import {
  Deliveries,
  eventually,
  freshName,
  listenDirect,
  outboxRows,
  projectedCount,
  recording,
  substrate,
  withLayerLive
} from "./support.js"

/**
 * Runs `body` while a projector with `options` and `publisher` runs; stops it after. The
 * projector runs on the live clock (its poll, backoff, lease renewal and shutdown deadline
 * are real time; the TestClock of `it.effect` would never let them pass); `body` on the test's.
 */
const withProjector = <A, E, R>(
  options: Projector.ProjectorOptions,
  publisher: Layer.Layer<Publisher.Publisher>,
  body: Effect.Effect<A, E, R>
) => withLayerLive(Projector.layer(options).pipe(Layer.provide(publisher)), body)

const freshTopic = () => freshName("p")

describe("Projector", () => {
  it.layer(substrate(), { timeout: "3 minutes" })((it) => {
    it.effect("delivers every committed message once and never a rolled-back one", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic()
        const deliveries = new Deliveries()
        const committed: Array<string> = []
        const rolledBack: Array<string> = []
        yield* withProjector(
          { topics: [topic], pollInterval: "50 millis" },
          recording(deliveries),
          Effect.gen(function*() {
            for (let i = 0; i < 40; i++) {
              if (i % 4 === 3) {
                yield* Effect.flip(sql.withTransaction(
                  Effect.andThen(
                    Effect.tap(outbox.enqueue(topic, { i }), (id) => Effect.sync(() => rolledBack.push(id))),
                    Effect.fail("rollback")
                  )
                ))
              } else {
                committed.push(yield* sql.withTransaction(outbox.enqueue(topic, { i })))
              }
            }
            yield* eventually(projectedCount(committed), (n) => n === committed.length)
          })
        )
        expect(deliveries.ids().sort()).toEqual([...committed].sort())
        expect(deliveries.ids().filter((id) => rolledBack.includes(id))).toEqual([])
      }))

    it.effect("wakes on LISTEN: commit to handler well below the poll interval", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic()
        const delivered = yield* Deferred.make<number>()
        const publisher = Publisher.layerHandler(() => Effect.asVoid(Deferred.succeed(delivered, Date.now())))
        const latency = yield* withProjector(
          { topics: [topic], pollInterval: "1 hour", ...(yield* listenDirect) },
          publisher,
          Effect.gen(function*() {
            // Commit once the listener's LISTEN has completed (its session is idle after it).
            yield* eventually(
              sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                                  WHERE application_name = ${APPLICATION_NAME} AND query LIKE 'LISTEN%' AND state = 'idle'`,
              (rows) => rows[0]!.n > 0
            )
            const committedAt = yield* Effect.map(sql.withTransaction(outbox.enqueue(topic, {})), () => Date.now())
            const deliveredAt = yield* Deferred.await(delivered).pipe(Effect.timeout("10 seconds"), TestClock.withLive)
            return deliveredAt - committedAt
          })
        )
        // The poll interval is an hour: only the notification can explain a delivery.
        expect(latency).toBeLessThan(2_000)
      }))

    it.effect("the listener reconnects after its backend is terminated", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic()
        const deliveries = new Deliveries()
        yield* withProjector(
          { topics: [topic], pollInterval: "1 hour", ...(yield* listenDirect) },
          recording(deliveries),
          Effect.gen(function*() {
            const listening = sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                                                  WHERE application_name = ${APPLICATION_NAME} AND query LIKE 'LISTEN%'`
            yield* eventually(listening, (rows) => rows[0]!.n > 0)
            expect(yield* Faults.terminateBackends(APPLICATION_NAME)).toBeGreaterThan(0)
            yield* eventually(listening, (rows) => rows[0]!.n > 0)
            const id = yield* outbox.enqueue(topic, {})
            yield* eventually(projectedCount([id]), (n) => n === 1, 10)
          })
        )
        expect(deliveries.seen).toHaveLength(1)
      }))

    it.effect("without a PgClient (no LISTEN) it still delivers by polling", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const topic = freshTopic()
        const deliveries = new Deliveries()
        const id = yield* outbox.enqueue(topic, {})
        // Only the services a generic SqlClient user has: no PgClient in context.
        const generic = Layer.mergeAll(
          Layer.succeed(Outbox.Outbox, outbox),
          Layer.succeed(OutboxWorker.OutboxWorker, yield* OutboxWorker.OutboxWorker),
          Layer.succeed(SqlClient.SqlClient, sql)
        )
        yield* withProjector(
          { topics: [topic], pollInterval: "50 millis" },
          recording(deliveries),
          eventually(projectedCount([id]), (n) => n === 1)
        )
          .pipe(Effect.provide(generic))
        expect(deliveries.ids()).toEqual([id])
      }))

    it.effect("a permanent failure with a 100,000-character error goes dead at once, its error stored cut, never delivered again", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic()
        const id = yield* outbox.enqueue(topic, {})
        const deliveries = new Deliveries()
        const counts = yield* Projector.drain({ topics: [topic] }).pipe(
          Effect.provide(recording(deliveries, () => Effect.fail(Publisher.permanent("E".repeat(100_000)))))
        )
        expect(counts).toMatchObject({ claimed: 1, dead: 1, stale: 0 })
        const [row] = yield* outboxRows([id])
        expect(row).toMatchObject({ dead: true, attempt_count: 1 })
        expect(row!.last_error).toContain("[truncated: 100000 characters]")
        // Dead: a second drain claims nothing.
        expect(yield* Projector.drain({ topics: [topic] }).pipe(Effect.provide(recording(deliveries)))).toMatchObject({
          claimed: 0
        })
        expect(deliveries.ids()).toEqual([id])
      }))

    it.effect("retryable failures are released with backoff and retried; permanent ones and exhausted attempts go dead", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic()
        const [flaky, poison, schemaBad] = yield* outbox.enqueueMany([
          { topic, payload: { kind: "flaky", amount: 1 } },
          { topic, payload: { kind: "poison", amount: 2 } },
          { topic, payload: { kind: "flaky", amount: "not a number" } }
        ])
        const deliveries = new Deliveries()
        let flakyFailures = 0
        const behaviour = (message: OutboxWorker.OutboxMessage) => {
          const payload = message.payload as { kind: string }
          if (payload.kind === "poison") return Effect.fail(Publisher.permanent("rejected by destination"))
          if (flakyFailures < 2) {
            flakyFailures++
            return Effect.fail(Publisher.retryable("destination busy"))
          }
          return Effect.void
        }
        const counts = yield* Projector.drain({
          topics: [topic],
          // A retry waits at least 250 ms (half the minimum): this drain ends before it.
          backoff: { min: "500 millis", max: "500 millis" },
          schemas: { [topic]: Schema.Struct({ kind: Schema.String, amount: Schema.Number }) }
        }).pipe(Effect.provide(recording(deliveries, behaviour)))
        expect(counts).toMatchObject({ claimed: 3, retried: 1, dead: 2, delivered: 0 })
        const rows = yield* outboxRows([flaky!, poison!, schemaBad!])
        expect(rows[1]).toMatchObject({ dead: true, last_error: "rejected by destination (dead: a permanent failure)" })
        expect(rows[2]!.dead).toBe(true)
        expect(rows[2]!.last_error).toMatch(/does not decode/)
        // The undecodable one never reached the publisher.
        expect(deliveries.ids()).not.toContain(schemaBad)
        // The flaky one is retried after its backoff and eventually delivered.
        const later = yield* eventually(
          Projector.drain({ topics: [topic], backoff: { min: "500 millis", max: "500 millis" } }).pipe(
            Effect.provide(recording(deliveries, behaviour)),
            Effect.andThen(outboxRows([flaky!]))
          ),
          (rows) => rows[0]!.projected
        )
        expect(later[0]).toMatchObject({ attempt_count: 3, projected: true })
      }))

    it.effect("a delivery past its timeout, or a publisher that dies, is released for a retry with the reason", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic()
        const [hangs, dies, fine] = yield* outbox.enqueueMany([
          { topic, payload: { kind: "hangs" } },
          { topic, payload: { kind: "dies" } },
          { topic, payload: { kind: "fine" } }
        ])
        const publisher = Publisher.layerHandler((message) => {
          const kind = (message.payload as { kind: string }).kind
          return kind === "hangs"
            ? Effect.never
            : kind === "dies"
            ? Effect.die(new Error("bug in handler"))
            : Effect.void
        })
        const counts = yield* Projector.drain({
          topics: [topic],
          deliveryTimeout: "200 millis",
          backoff: { min: "1 minute", max: "1 minute" }
        }).pipe(Effect.provide(publisher), TestClock.withLive)
        expect(counts).toMatchObject({ claimed: 3, delivered: 1, retried: 2 })
        const rows = yield* outboxRows([hangs!, dies!, fine!])
        expect(rows[0]!.last_error).toBe("delivery timed out after 200ms")
        expect(rows[1]!.last_error).toMatch(/the publisher died: .*bug in handler/s)
        expect(rows[2]!.projected).toBe(true)
      }))

    it.effect("a topic's backoff bounds its own retries; other topics keep the projector's backoff", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const slow = freshTopic()
        const fast = freshTopic()
        const [slowId, fastId] = yield* outbox.enqueueMany([{ topic: slow, payload: 1 }, { topic: fast, payload: 2 }])
        const publisher = Publisher.layerHandler(() => Effect.fail(Publisher.retryable("down")))
        const counts = yield* Projector.drain({
          topics: [slow, fast],
          backoff: { min: "2 seconds", max: "2 seconds" },
          backoffByTopic: { [slow]: { min: "1 hour", max: "1 hour" } }
        }).pipe(Effect.provide(publisher), TestClock.withLive)
        expect(counts).toMatchObject({ claimed: 2, retried: 2 })
        const table = sql.literal((yield* DurableSettings).table("outbox_messages"))
        const waits = yield* sql<{ id: string; seconds: number }>`
          SELECT id::text, extract(epoch FROM available_at - now())::float8 AS seconds
            FROM ${table} WHERE id = ANY(${[slowId!, fastId!]}::bigint[]) ORDER BY id`
        // Full jitter within [min/2, ceiling]: the first retry waits between half the minimum and the minimum.
        expect(waits[0]!.seconds).toBeGreaterThan(1700)
        expect(waits[0]!.seconds).toBeLessThanOrEqual(3600)
        expect(waits[1]!.seconds).toBeLessThanOrEqual(2)
      }))

    it.effect("a handler's requirements come from its layer: in the projector's lanes and in a direct publish", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic()
        class Sink extends Context.Service<Sink, Array<unknown>>()("test/Sink") {}
        const sink: Array<unknown> = []
        const publisher = Publisher.layerHandler((message) =>
          Effect.map(Sink, (seen) => void seen.push(message.payload))
        ).pipe(
          Layer.provide(Layer.succeed(Sink, sink))
        )
        yield* outbox.enqueueMany([1, 2, 3].map((n) => ({ topic, payload: n })))
        const counts = yield* Projector.drain({ topics: [topic], concurrency: 2 }).pipe(Effect.provide(publisher))
        expect(counts).toMatchObject({ claimed: 3, delivered: 3 })
        const direct = yield* Effect.flatMap(
          Publisher.Publisher,
          (p) =>
            p.publish({
              id: "0",
              topic,
              orderingKey: null,
              payload: 4,
              headers: {},
              createdAt: "",
              attempt: 1,
              claim: { messageId: "0", worker: "w", generation: 1 }
            })
        ).pipe(Effect.provide(publisher), Effect.result)
        expect(direct._tag).toBe("Success")
        expect([...sink].sort()).toEqual([1, 2, 3, 4])
      }))

    it.effect("a hung delivery cut at its deadline does not hold back the messages after it on its lane", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic()
        const ids = yield* outbox.enqueueMany(
          ["hangs", "fine", "hangs", "fine", "fine"].map((kind) => ({ topic, payload: { kind } }))
        )
        const publisher = Publisher.layerHandler((message) =>
          (message.payload as { kind: string }).kind === "hangs" ? Effect.never : Effect.void
        )
        // One lane: each hung publish is cut and a fresh lane takes the next message.
        const counts = yield* Projector.drain({
          topics: [topic],
          concurrency: 1,
          deliveryTimeout: "100 millis",
          backoff: { min: "1 minute", max: "1 minute" }
        }).pipe(Effect.provide(publisher), TestClock.withLive)
        expect(counts).toMatchObject({ claimed: 5, delivered: 3, retried: 2, stale: 0 })
        const rows = yield* outboxRows(ids)
        expect(rows.map((row) => row.projected)).toEqual([false, true, false, true, true])
        expect(rows[0]!.last_error).toBe("delivery timed out after 100ms")
        expect(rows[2]!.last_error).toBe("delivery timed out after 100ms")
      }))

    it.effect("a slow delivery keeps its lease by renewal: no second worker takes it", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const topic = freshTopic()
        const id = yield* outbox.enqueue(topic, {})
        const deliveries = new Deliveries()
        const finish = yield* Deferred.make<void>()
        const slow = recording(deliveries, () => Deferred.await(finish))
        const lease = sql<
          { until: string | null }
        >`SELECT claimed_until::text AS until FROM durable.outbox_messages WHERE id = ${id}`
        yield* withProjector(
          { topics: [topic], lease: "2 seconds", pollInterval: "50 millis", workerId: "slow-a" },
          slow,
          Effect.gen(function*() {
            // The database's clock decides: once past a lease end it has seen, the row is still
            // held by the same claim, so a renewal extended it.
            const [seen] = yield* eventually(lease, (rows) => rows[0]!.until !== null)
            const [row] = yield* eventually(
              sql<{ past: boolean; held: boolean; claimed_by: string; claim_generation: string }>`
                SELECT now() > ${seen!.until}::timestamptz AS past, claimed_until > now() AS held, claimed_by,
                       claim_generation::text FROM durable.outbox_messages WHERE id = ${id}`,
              (rows) => rows[0]!.past && rows[0]!.held,
              20
            )
            expect(row).toMatchObject({ claimed_by: "slow-a", claim_generation: "1" })
            // Past the first lease, a second worker finds nothing to claim.
            expect(yield* worker.claim({ worker: "slow-b", topics: [topic], limit: 10, lease: "1 minute" })).toEqual([])
            yield* Deferred.succeed(finish, undefined)
            yield* eventually(projectedCount([id]), (n) => n === 1)
          })
        )
        expect(deliveries.ids()).toEqual([id])
        expect((yield* outboxRows([id]))[0]).toMatchObject({ claim_generation: "1", attempt_count: 1 })
      }))

    it.effect("a delivery whose claim went stale never marks the row and is counted", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic()
        const id = yield* outbox.enqueue(topic, {})
        const started = yield* Deferred.make<void>()
        const proceed = yield* Deferred.make<void>()
        const publisher = Publisher.layerHandler(() =>
          Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(proceed))
        )
        const counts = yield* withProjector(
          { topics: [topic], lease: "1 minute", pollInterval: "50 millis" },
          publisher,
          Effect.gen(function*() {
            yield* Deferred.await(started)
            // Another worker takes the message over (as after a lost lease).
            yield* sql`UPDATE durable.outbox SET claimed_by = 'thief', claim_generation = claim_generation + 1 WHERE id = ${id}`
            yield* Deferred.succeed(proceed, undefined)
            const projector = yield* Projector.Projector
            return yield* eventually(projector.counts, (c) => c.stale === 1)
          })
        )
        expect(counts).toMatchObject({ stale: 1, delivered: 0 })
        expect((yield* outboxRows([id]))[0]).toMatchObject({
          projected: false,
          claimed_by: "thief",
          claim_generation: "2"
        })
      }))

    it.effect(
      "per-key order: 50 keys x 200 messages through 4 projectors, each key delivered in enqueue order",
      () =>
        Effect.gen(function*() {
          const outbox = yield* Outbox.Outbox
          const topic = freshTopic()
          const keys = Array.from({ length: 50 }, (_, k) => `key-${k}`)
          // Interleaved: message i of every key, then i + 1, so keys compete in every claim.
          const ids = yield* outbox.enqueueMany(
            Array.from(
              { length: 200 },
              (_, i) => keys.map((key) => ({ topic, payload: { key, seq: i }, options: { orderingKey: key } }))
            )
              .flat()
          )
          const order = new Map<string, Array<number>>(keys.map((key) => [key, []]))
          let inFlight = 0
          let maxInFlight = 0
          const publisher = Publisher.layerHandler((message) =>
            Effect.gen(function*() {
              const { key, seq } = message.payload as { key: string; seq: number }
              inFlight++
              maxInFlight = Math.max(maxInFlight, inFlight)
              order.get(key)!.push(seq)
              yield* Effect.yieldNow
              inFlight--
            })
          )
          yield* Effect.all(
            [1, 2, 3, 4].map((n) =>
              withProjector(
                // One to four batch loops per projector: per-key order must hold across all of them.
                {
                  topics: [topic],
                  workerId: `ordered-${n}`,
                  pollInterval: "20 millis",
                  concurrency: 16,
                  batchesInFlight: n
                },
                publisher,
                eventually(projectedCount(ids), (count) => count === ids.length, 120)
              )
            ),
            { concurrency: "unbounded" }
          )
          for (const key of keys) expect(order.get(key)).toEqual(Array.from({ length: 200 }, (_, i) => i))
          expect(maxInFlight).toBeGreaterThan(1)
        }),
      180_000
    )

    // Deliveries run at once, with a barrier: each waits until `target` run together, or until
    // no other can start — no claim under way and every claimed message's delivery started
    // (the projector's claims are watched through its worker); returns the most that ever ran
    // at once.
    const mostAtOnce = (options: Projector.ProjectorOptions, messages: number, target: number) =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const topic = freshTopic()
        const ids = yield* outbox.enqueueMany(Array.from({ length: messages }, (_, i) => ({ topic, payload: i })))
        let inFlight = 0
        let most = 0
        let reached = false
        let claiming = 0
        let unstarted = 0
        const held: Array<Deferred.Deferred<void>> = []
        const release = () => {
          if (!reached && (claiming > 0 || unstarted > 0)) return
          for (const deferred of held.splice(0)) Deferred.doneUnsafe(deferred, Exit.void)
        }
        const watched = OutboxWorker.OutboxWorker.of({
          ...worker,
          claim: (claimOptions) =>
            Effect.suspend(() => {
              claiming++
              return worker.claim(claimOptions).pipe(
                Effect.onExit((exit) =>
                  Effect.sync(() => {
                    claiming--
                    if (Exit.isSuccess(exit)) unstarted += exit.value.length
                    release()
                  })
                )
              )
            })
        })
        const publisher = Publisher.layerHandler(() =>
          Effect.gen(function*() {
            unstarted--
            most = Math.max(most, ++inFlight)
            if (inFlight >= target) reached = true
            const deferred = yield* Deferred.make<void>()
            held.push(deferred)
            release()
            yield* Deferred.await(deferred)
            inFlight--
          })
        )
        yield* withProjector(
          { topics: [topic], pollInterval: "20 millis", ...options },
          publisher,
          eventually(projectedCount(ids), (count) => count === ids.length, 30)
        ).pipe(Effect.provideService(OutboxWorker.OutboxWorker, watched))
        return most
      })

    it.effect("batchesInFlight overlaps batches: deliveries of two batches run at once, never more", () =>
      Effect.gen(function*() {
        // One message per batch: two deliveries at once can only come from two batches.
        expect(yield* mostAtOnce({ batchSize: 1, batchesInFlight: 2 }, 6, 2)).toBe(2)
        expect(yield* mostAtOnce({ batchSize: 1, batchesInFlight: 1 }, 6, 2)).toBe(1)
      }))

    it.effect("concurrency bounds the deliveries in flight across all batches", () =>
      Effect.gen(function*() {
        expect(yield* mostAtOnce({ batchSize: 5, batchesInFlight: 4, concurrency: 3 }, 20, 3)).toBe(3)
        expect(yield* mostAtOnce({ batchSize: 5, batchesInFlight: 4, concurrency: 12 }, 20, 12)).toBe(12)
      }))

    it.effect("closing the scope lets an in-flight delivery finish and marks it", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic()
        const id = yield* outbox.enqueue(topic, {})
        const started = yield* Deferred.make<void>()
        const publisher = Publisher.layerHandler(() =>
          // The projector's lanes run on the live clock.
          Effect.andThen(Deferred.succeed(started, undefined), Effect.sleep("300 millis"))
        )
        yield* withProjector(
          { topics: [topic], pollInterval: "50 millis", shutdownDeadline: "5 seconds" },
          publisher,
          Deferred.await(started)
        )
        expect((yield* outboxRows([id]))[0]).toMatchObject({ projected: true })
      }))

    it.effect("past the shutdown deadline the unfinished deliveries are released for another worker at once", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic()
        const ids = yield* outbox.enqueueMany([1, 2, 3].map((i) => ({ topic, payload: i })))
        const started = yield* Deferred.make<void>()
        const stuck = Publisher.layerHandler(() => Effect.andThen(Deferred.succeed(started, undefined), Effect.never))
        yield* withProjector(
          {
            topics: [topic],
            pollInterval: "50 millis",
            shutdownDeadline: "200 millis",
            lease: "1 hour",
            concurrency: 1
          },
          stuck,
          Deferred.await(started)
        )
        const rows = yield* outboxRows(ids)
        expect(rows.every((row) => row.released && !row.projected)).toBe(true)
        const next = yield* (yield* OutboxWorker.OutboxWorker).claim({
          worker: "next",
          topics: [topic],
          limit: 10,
          lease: "1 minute"
        })
        expect(next.map((m) => m.id)).toEqual(ids)
      }))

    it.effect(
      "starting and stopping the projector 200 times leaks no fiber and no connection",
      () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const connections = Effect.map(
            sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database()`,
            (rows) => rows[0]!.n
          )
          // Every fiber started under the tracker (the projectors' and all they fork) is counted
          // when it starts and when it ends.
          let live = 0
          const tracker: Metric.FiberRuntimeMetricsService = {
            recordFiberStart: () => void live++,
            recordFiberEnd: () => void live--
          }
          const publisher = recording(new Deliveries())
          yield* withProjector({ pollInterval: "50 millis" }, publisher, Effect.void)
          const baseline = yield* connections
          for (let i = 0; i < 200; i++) {
            yield* withProjector({ pollInterval: "50 millis" }, publisher, Effect.yieldNow).pipe(
              Effect.provideService(Metric.FiberRuntimeMetrics, tracker)
            )
          }
          expect(live).toEqual(0)
          // The listener's connection closes asynchronously; wait for the count to settle.
          const settled = yield* eventually(connections, (n) => n <= baseline, 10)
          expect(settled).toBeLessThanOrEqual(baseline)
        }),
      120_000
    )

    it.effect("bad options are typed errors naming the option", () =>
      Effect.gen(function*() {
        const cases: ReadonlyArray<readonly [Projector.ProjectorOptions, string]> = [
          [{ batchSize: 0 }, "batchSize"],
          [{ concurrency: 1.5 }, "concurrency"],
          [{ batchesInFlight: 0 }, "batchesInFlight"],
          [{ batchesInFlight: 65 }, "batchesInFlight"],
          [{ lease: 0 }, "lease"],
          [{ pollInterval: -1 }, "pollInterval"],
          [{ backoff: { min: "10 seconds", max: "1 second" } }, "backoff"],
          [{ workerId: "has space" }, "workerId"],
          [{ topics: [] }, "topics"],
          // Topics the outbox would refuse are refused here, not by every claim forever after.
          [{ topics: ["ok", "nul\u0000"] }, "topics[1]"],
          [{ topics: ["x".repeat(129)] }, "topics[0]"],
          [{ lease: Number.NaN }, "lease"],
          [{ lease: "-5 seconds" }, "lease"],
          [{ maxLeaseExpiries: 0 }, "maxLeaseExpiries"],
          [{ perKey: 0 }, "perKey"],
          [{ perKey: 1001 }, "perKey"],
          [{ backoffByTopic: { orders: { min: "10 seconds", max: "1 second" } } }, "backoffByTopic.orders"],
          [{ backoffByTopic: { orders: { min: "10 minutes" } } }, "backoffByTopic.orders"],
          [{ bogus: true } as Projector.ProjectorOptions, "bogus"]
        ]
        for (const [options, field] of cases) {
          const error = yield* Effect.flip(withProjector(options, recording(new Deliveries()), Effect.void))
          expect(error).toMatchObject({ _tag: "DurableConfigError", field })
        }
      }))
  })
})

describe("Projector.layerConfig", () => {
  it.effect("reads PROJECTOR_* settings and refuses bad ones with a typed error", () =>
    Effect.gen(function*() {
      const withEnv = (env: Record<string, string>) =>
        Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord(env))
      const options = yield* Projector.settingsFromConfig().pipe(
        withEnv({ PROJECTOR_TOPICS: "a,b", PROJECTOR_BATCH_SIZE: "7", PROJECTOR_LEASE: "5 seconds" })
      )
      expect(options).toMatchObject({ topics: ["a", "b"], batchSize: 7 })
      // The options are refused before the outbox is touched: a placeholder stands in for it.
      const build = (env: Record<string, string>) =>
        Effect.flip(Effect.scoped(Layer.build(
          Projector.layerConfig().pipe(Layer.provide(Layer.mergeAll(
            Layer.succeed(Outbox.Outbox, {} as never),
            Layer.succeed(OutboxWorker.OutboxWorker, {} as never),
            Layer.succeed(Publisher.Publisher, { publish: () => Effect.void })
          )))
        ))).pipe(withEnv(env))
      expect(yield* build({ PROJECTOR_BATCH_SIZE: "lots" })).toMatchObject({
        _tag: "DurableConfigError",
        field: "PROJECTOR_BATCH_SIZE"
      })
      expect(yield* build({ PROJECTOR_BATCH_SIZE: "0" })).toMatchObject({
        _tag: "DurableConfigError",
        field: "PROJECTOR_BATCH_SIZE"
      })
    }))
})

describe("Projector on a database the substrate was never migrated into", () => {
  // The start-up version check is off, to see what a running projector does when the schema goes missing.
  it.layer(Durable.layerOver({ checkSchemaVersion: false }).pipe(Layer.provideMerge(TestDatabase.layerFresh())))(
    (it) => {
      it.effect("logs an error that says to run the migrations, counts it, and keeps retrying without crashing", () =>
        Effect.gen(function*() {
          const telemetry = Telemetry.make()
          const errors = Effect.map(Metric.value(Projector.metrics.storeErrors), (state) => state.count)
          const before = yield* errors
          yield* withProjector(
            { pollInterval: "50 millis" },
            recording(new Deliveries()),
            eventually(errors, (n) => n >= before + 2)
          ).pipe(telemetry.observed)
          const line = telemetry.logs.find((entry) => entry.includes("run the migrations"))
          expect(line).toMatch(/schema .*durable.* does not exist/)
          expect(line).toContain("Durable.layer({ migrate: true })")
        }))
    }
  )
})
