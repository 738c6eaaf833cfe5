import * as Outbox from "@effect-durable/pg/Outbox"
import * as Telemetry from "@effect-durable/testing/Telemetry"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as SqlClient from "effect/sql/SqlClient"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import { Deliveries, eventually, freshName, outboxRows, recording, withLayerLive } from "./support.js"

const withProjector = <A, E, R>(
  options: Projector.ProjectorOptions,
  publisher: Layer.Layer<Publisher.Publisher>,
  body: Effect.Effect<A, E, R>
) => withLayerLive(Projector.layer(options).pipe(Layer.provide(publisher)), body)

const count = (counter: Metric.Counter<number>) => Effect.map(Metric.value(counter), (state) => state.count)

/** A publisher that records each delivery and holds the first one until `release` completes. */
const holdingFirst = Effect.gen(function*() {
  const deliveries = new Deliveries()
  const started = yield* Deferred.make<void>()
  const release = yield* Deferred.make<void>()
  // Decided when the publish runs (after it is recorded), not when it is built.
  const publisher = recording(
    deliveries,
    () =>
      Effect.suspend(() =>
        deliveries.seen.length === 1
          ? Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(release))
          : Effect.void
      )
  )
  return { deliveries, started, release, publisher }
})

// A short lock timeout, so that a renewal blocked by a table lock fails quickly.
const Live = TestSubstrate.layer({
  settings: { lockTimeout: "300 millis" },
  database: { maxConnections: 16, applicationName: "leases-test" }
})

describe("Projector leases", () => {
  it.layer(Live, { timeout: "2 minutes" })((it) => {
    it.effect("a renewal that finds a claim taken over never publishes it; the rest of the batch is delivered", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const topic = freshName("taken")
        const [first, taken] = yield* outbox.enqueueMany([{ topic, payload: 1 }, { topic, payload: 2 }])
        const { deliveries, publisher, release, started } = yield* holdingFirst
        const lost = yield* count(Projector.metrics.leasesLost)
        const telemetry = Telemetry.make()
        const counts = yield* withProjector(
          { topics: [topic], concurrency: 1, lease: "1500 millis", pollInterval: "50 millis" },
          publisher,
          Effect.gen(function*() {
            yield* Deferred.await(started)
            // Another worker holds the second message now (as after a stall past its lease).
            yield* sql`UPDATE durable.outbox SET claimed_by = 'thief', claim_generation = claim_generation + 1,
                                        claimed_until = now() + interval '1 hour' WHERE id = ${taken!}`
            yield* eventually(count(Projector.metrics.leasesLost), (n) => n > lost)
            yield* Deferred.succeed(release, undefined)
            return yield* eventually((yield* Projector.Projector).counts, (c) => c.delivered + c.stale === 2)
          })
        ).pipe(telemetry.observed)
        expect(counts).toMatchObject({ claimed: 2, delivered: 1, stale: 1 })
        // Each lost lease is said at WARN, with its message's topic and id.
        const lines = telemetry.entries.filter((entry) => entry.message.includes("lease lost"))
        expect(lines).toEqual([expect.objectContaining({
          level: "Warn",
          annotations: expect.objectContaining({ messageId: taken, topic })
        })])
        expect(deliveries.ids()).toEqual([first])
        expect(yield* outboxRows([first!, taken!])).toMatchObject([
          { projected: true },
          { projected: false, claimed_by: "thief", claim_generation: "2" }
        ])
      }))

    it.effect("a keyed run stops behind a message whose lease was lost mid-publish: the rest of it is held back, never published by this holder", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const topic = freshName("taken-run")
        const key = `${topic}-customer`
        const [first, second, third] = yield* outbox.enqueueMany(
          [1, 2, 3].map((n) => ({ topic, payload: n, options: { orderingKey: key } }))
        )
        const { deliveries, publisher, release, started } = yield* holdingFirst
        const lost = yield* count(Projector.metrics.leasesLost)
        const counts = yield* withProjector(
          { topics: [topic], lease: "1500 millis", pollInterval: "50 millis" },
          publisher,
          Effect.gen(function*() {
            yield* Deferred.await(started)
            // Another worker holds the first message now, mid-publish (as after a stall past its lease).
            yield* sql`UPDATE durable.outbox SET claimed_by = 'thief', claim_generation = claim_generation + 1,
                                        claimed_until = now() + interval '1 hour' WHERE id = ${first!}`
            yield* eventually(count(Projector.metrics.leasesLost), (n) => n > lost)
            yield* Deferred.succeed(release, undefined)
            return yield* eventually((yield* Projector.Projector).counts, (c) => c.stale + c.heldBack >= 3)
          })
        )
        expect(counts).toMatchObject({ claimed: 3, delivered: 0, stale: 1, heldBack: 2 })
        // The first was being published when its lease was lost; the rest of its run never was.
        expect(deliveries.ids()).toEqual([first])
        expect(yield* outboxRows([first!, second!, third!])).toMatchObject([
          { projected: false, claimed_by: "thief" },
          { projected: false, released: true },
          { projected: false, released: true }
        ])
      }))

    it.effect("a renewal that fails leaves the batch's unstarted messages unpublished; they are given back and delivered once", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const topic = freshName("doubt")
        const ids = yield* outbox.enqueueMany([{ topic, payload: 1 }, { topic, payload: 2 }])
        const { deliveries, publisher, release, started } = yield* holdingFirst
        const failures = yield* count(Projector.metrics.renewalFailures)
        const locked = yield* Deferred.make<void>()
        const unlock = yield* Deferred.make<void>()
        yield* withProjector(
          { topics: [topic], concurrency: 1, lease: "3 seconds", pollInterval: "50 millis", batchSize: 2 },
          publisher,
          Effect.gen(function*() {
            yield* Deferred.await(started)
            // A table lock makes the next renewal time out: the batch's leases are in doubt.
            const holder = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
              yield* sql`LOCK TABLE durable.outbox IN ACCESS EXCLUSIVE MODE`
              yield* Deferred.succeed(locked, undefined)
              yield* Deferred.await(unlock)
            })))
            yield* Deferred.await(locked)
            yield* eventually(count(Projector.metrics.renewalFailures), (n) => n > failures)
            yield* Deferred.succeed(unlock, undefined)
            yield* Fiber.join(holder)
            yield* Deferred.succeed(release, undefined)
            yield* eventually(outboxRows(ids), (rows) => rows.every((row) => row.projected))
          })
        )
        // The second message was not published under the doubtful lease, but later, once.
        expect(deliveries.ids()).toEqual(ids)
        const [, second] = yield* sql<{ failure_count: number; lease_expiries: number }>`
          SELECT failure_count, lease_expiries FROM durable.outbox_messages WHERE id = ANY(${ids}::bigint[]) ORDER BY id`
        expect(second).toEqual({ failure_count: 0, lease_expiries: 0 })
      }))
  })
})
