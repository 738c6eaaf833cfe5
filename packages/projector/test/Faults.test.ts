import { DatabaseError } from "@effect-durable/core/Errors"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import { eventually, projectedCount, substrate, withLayerLive } from "./support.js"

type Operation = "claim" | "markProjectedMany" | "release"
type Fault = "fail" | "stall"

/**
 * Wraps the outbox so that chosen calls (1-based, per operation) fail with a retryable
 * database error or stall for a while before going through: a deterministic fault schedule.
 */
const faulty = (
  outbox: OutboxWorker.OutboxWorker["Service"],
  schedule: Partial<Record<Operation, Record<number, Fault>>>
) => {
  const calls: Record<Operation, number> = { claim: 0, markProjectedMany: 0, release: 0 }
  const inject = <A, E>(operation: Operation, effect: Effect.Effect<A, E>): Effect.Effect<A, E | DatabaseError> =>
    Effect.suspend((): Effect.Effect<A, E | DatabaseError> => {
      const fault = schedule[operation]?.[++calls[operation]]
      if (fault === "fail") {
        return Effect.fail(new DatabaseError({ code: "57P01", retryable: true, operation, detail: "injected fault" }))
      }
      // Called by the projector's fibers, which run on the live clock.
      if (fault === "stall") return Effect.andThen(Effect.sleep("300 millis"), effect)
      return effect
    })
  return {
    calls,
    outbox: OutboxWorker.OutboxWorker.of({
      ...outbox,
      claim: (options) => inject("claim", outbox.claim(options)),
      markProjectedMany: (claims) => inject("markProjectedMany", outbox.markProjectedMany(claims)),
      release: (claim, options) => inject("release", outbox.release(claim, options)) as never
    })
  }
}

describe("Projector under store faults", () => {
  it.layer(substrate())((it) => {
    it.effect(
      "survives failing and stalling claim, mark and release calls; marks every message exactly once",
      () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          // Every transition to projected is logged: a second mark of a row would show twice.
          yield* sql`CREATE TABLE mark_log (id bigint)`
          yield* sql.unsafe(`CREATE FUNCTION log_mark() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN INSERT INTO mark_log VALUES (NEW.id); RETURN NEW; END $$`)
          yield* sql.unsafe(
            // A mark moves the message into the history: each insert there is one mark.
            `CREATE TRIGGER log_mark AFTER INSERT ON durable.outbox_history FOR EACH ROW EXECUTE FUNCTION log_mark()`
          )
          const outbox = yield* Outbox.Outbox
          const ids = yield* outbox.enqueueMany(
            Array.from({ length: 30 }, (_, i) => ({ topic: "faulty", payload: { i } }))
          )
          const { calls, outbox: broken } = faulty(yield* OutboxWorker.OutboxWorker, {
            claim: { 1: "fail", 3: "stall", 4: "fail" },
            markProjectedMany: { 1: "fail", 3: "stall" },
            release: { 1: "fail" }
          })
          let firstTry = true
          const publisher = Publisher.layerHandler((message) => {
            // One retryable delivery failure, so that release (and its fault) is exercised.
            if ((message.payload as { i: number }).i === 5 && firstTry) {
              firstTry = false
              return Effect.fail(Publisher.retryable("flaky"))
            }
            return Effect.void
          })
          const projector = Projector.layer({
            topics: ["faulty"],
            batchSize: 10,
            lease: "1 second",
            pollInterval: "50 millis",
            backoff: { min: "20 millis", max: "50 millis" }
          }).pipe(Layer.provide(Layer.merge(publisher, Layer.succeed(OutboxWorker.OutboxWorker, broken))))
          yield* withLayerLive(projector, eventually(projectedCount(ids), (n) => n === ids.length, 60))
          expect(calls.claim).toBeGreaterThanOrEqual(4)
          expect(calls.markProjectedMany).toBeGreaterThanOrEqual(3)
          expect(calls.release).toBeGreaterThanOrEqual(1)
          const marks = yield* sql<
            { id: string; n: number }
          >`SELECT id::text, count(*)::int AS n FROM mark_log GROUP BY id ORDER BY id`
          expect(marks.map((m) => m.id).sort()).toEqual([...ids].sort())
          expect(marks.every((m) => m.n === 1)).toBe(true)
        }),
      120_000
    )

    it.effect("a mark that fails on a lost connection is sent again while the lease holds: nothing is delivered twice", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const ids = yield* outbox.enqueueMany(
          Array.from({ length: 20 }, (_, i) => ({ topic: "lost-mark", payload: { i } }))
        )
        const { calls, outbox: broken } = faulty(yield* OutboxWorker.OutboxWorker, {
          markProjectedMany: { 1: "fail", 2: "fail" }
        })
        const deliveries = new Map<string, number>()
        const publisher = Publisher.layerHandler((message) =>
          Effect.sync(() => void deliveries.set(message.id, (deliveries.get(message.id) ?? 0) + 1))
        )
        // A 30 s lease: were the batch left to it, the messages would be delivered again only
        // after 30 s, past this test's wait.
        const projector = Projector.layer({
          topics: ["lost-mark"],
          batchSize: 20,
          lease: "30 seconds",
          pollInterval: "50 millis"
        })
          .pipe(Layer.provide(Layer.merge(publisher, Layer.succeed(OutboxWorker.OutboxWorker, broken))))
        yield* withLayerLive(projector, eventually(projectedCount(ids), (n) => n === ids.length, 10))
        expect(calls.markProjectedMany).toBeGreaterThanOrEqual(3)
        expect([...deliveries.keys()].sort()).toEqual([...ids].sort())
        expect([...deliveries.values()].every((n) => n === 1)).toBe(true)
      }))

    it.effect("the successes of a batch are marked while its slowest delivery still runs, and none is delivered again meanwhile", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const ids = yield* outbox.enqueueMany(
          Array.from({ length: 6 }, (_, i) => ({ topic: "slow-tail", payload: { i } }))
        )
        const held = yield* Deferred.make<void>()
        const deliveries = new Map<string, number>()
        const publisher = Publisher.layerHandler((message) =>
          Effect.andThen(
            Effect.sync(() => void deliveries.set(message.id, (deliveries.get(message.id) ?? 0) + 1)),
            (message.payload as { i: number }).i === 5 ? Deferred.await(held) : Effect.void
          )
        )
        const projector = Projector.layer({
          topics: ["slow-tail"],
          batchSize: 6,
          concurrency: 2,
          lease: "3 seconds",
          deliveryTimeout: "1 minute",
          pollInterval: "50 millis"
        }).pipe(Layer.provide(publisher))
        const sql = yield* SqlClient.SqlClient
        const sixth = (since: string) =>
          sql<{ past: boolean; held: boolean; claim_generation: string }>`
            SELECT now() > ${since}::timestamptz + interval '3 seconds' AS past, claimed_until > now() AS held,
                   claim_generation::text FROM durable.outbox_messages WHERE id = ${ids[5]!}`
        yield* withLayerLive(
          projector,
          Effect.gen(function*() {
            // Marked within about a second (a third of the lease, at most a second), the sixth still held.
            yield* eventually(projectedCount(ids.slice(0, 5)), (n) => n === 5, 10)
            expect(yield* projectedCount(ids.slice(5))).toBe(0)
            // Held past two leases (the database's clock decides: a lease after the end of the one
            // it holds now), by its first claim: the sixth's lease is renewed, the five are not
            // claimed again.
            const [{ until }] = (yield* sql<{ until: string }>`
            SELECT claimed_until::text AS until FROM durable.outbox_messages WHERE id = ${ids[5]!}`) as [
              { until: string }
            ]
            const [row] = yield* eventually(sixth(until), (rows) => rows[0]!.past || !rows[0]!.held, 20)
            expect(row).toMatchObject({ past: true, held: true, claim_generation: "1" })
            yield* Deferred.succeed(held, undefined)
            yield* eventually(projectedCount(ids), (n) => n === ids.length, 10)
          })
        )
        expect([...deliveries.keys()].sort()).toEqual([...ids].sort())
        expect([...deliveries.values()].every((n) => n === 1)).toBe(true)
      }))
  })
})
