// What another package's code asks of the outbox without reading its table, on PostgreSQL and in
// memory alike. `Outbox.withdraw`: a message no worker holds or has settled can be withdrawn (as
// if never enqueued), one being delivered, delivered, dead or unknown is left as it is;
// `Outbox.waiting` says when each message still to be delivered is due. Bad ids are a typed
// refusal naming the rule, and nothing is withdrawn; a withdrawal in a transaction that rolls
// back withdraws nothing. `OutboxWorker.holds`: a claim holds its row while its lease runs, and
// in the caller's transaction the row stays locked to its end.
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import * as FastCheck from "fast-check"
import { sqlStateOf } from "../src/ErrorClassification.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxMemory from "../src/OutboxMemory.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { substrate } from "./support.js"

/** One message in each state a withdrawal tells apart; their ids. */
const messagesInEachState = Effect.gen(function*() {
  const outbox = yield* Outbox.Outbox
  const worker = yield* OutboxWorker.OutboxWorker
  const topic = TestSubstrate.freshName("withdraw")
  const delivering = yield* outbox.enqueue(topic, { state: "delivering" })
  const [held] = yield* worker.claim({ worker: "w", topics: [topic], limit: 1, lease: "1 minute" })
  const delivered = yield* outbox.enqueue(topic, { state: "delivered" })
  const [done] = yield* worker.claim({ worker: "w", topics: [topic], limit: 1, lease: "1 minute" })
  yield* worker.markProjected(done!.claim)
  const later = yield* outbox.enqueue(topic, { state: "later" }, { delay: "1 hour" })
  const ready = yield* outbox.enqueue(topic, { state: "ready" })
  expect([held!.id, done!.id]).toEqual([delivering, delivered])
  return { delivering, delivered, later, ready, held: held!, unknown: "999999999" }
})

const withdrawsOnlyWhatNoWorkerHolds = Effect.gen(function*() {
  const outbox = yield* Outbox.Outbox
  const worker = yield* OutboxWorker.OutboxWorker
  const m = yield* messagesInEachState
  const all = [m.unknown, m.ready, m.later, m.delivered, m.delivering]
  const waiting = yield* outbox.waiting(all)
  // In id order; the delivered and the unknown are not waiting.
  expect(waiting.map((w) => w.id)).toEqual([m.delivering, m.later, m.ready])
  const dueOf = (id: string) => Date.parse(waiting.find((w) => w.id === id)!.availableAt)
  expect(dueOf(m.later) - dueOf(m.ready)).toBeGreaterThan(3_590_000)
  expect(waiting.every((w) => /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z$/.test(w.availableAt))).toBe(true)
  expect(yield* outbox.withdraw(all)).toEqual([m.later, m.ready])
  // Again: nothing left to withdraw. The message being delivered still is, and its mark holds.
  expect(yield* outbox.withdraw(all)).toEqual([])
  expect((yield* outbox.waiting(all)).map((w) => w.id)).toEqual([m.delivering])
  yield* worker.markProjected(m.held.claim)
  expect(yield* outbox.waiting(all)).toEqual([])
})

const refusesBadIds = Effect.gen(function*() {
  const outbox = yield* Outbox.Outbox
  const m = yield* messagesInEachState
  yield* Effect.promise(() =>
    FastCheck.assert(
      FastCheck.asyncProperty(
        FastCheck.array(FastCheck.string(), { minLength: 1, maxLength: 5 }).filter((ids) =>
          ids.some((id) => !/^[1-9]\d{0,17}$/.test(id))
        ),
        (bad) =>
          Effect.runPromise(Effect.gen(function*() {
            const calls: ReadonlyArray<
              (
                ids: ReadonlyArray<string>
              ) => Effect.Effect<unknown, { readonly _tag: string; readonly message: string }>
            > = [outbox.withdraw, outbox.waiting]
            for (const call of calls) {
              const error = yield* Effect.flip(call([m.ready, ...bad]))
              expect(error._tag).toBe("InvalidInput")
              expect(error.message).toMatch(/ids/)
            }
          }))
      ),
      { numRuns: 50 }
    )
  )
  expect(yield* outbox.withdraw([])).toEqual([])
  // Nothing was withdrawn by a refused call.
  expect((yield* outbox.waiting([m.ready])).map((w) => w.id)).toEqual([m.ready])
})

/** A claim holds while it is the row's and its lease runs; not once it was marked, or a stale or malformed one. */
const holdsWhileItsLeaseRuns = Effect.gen(function*() {
  const worker = yield* OutboxWorker.OutboxWorker
  const m = yield* messagesInEachState
  expect(yield* worker.holds(m.held.claim)).toBe(true)
  expect(yield* worker.holds({ ...m.held.claim, generation: m.held.claim.generation + 1 })).toBe(false)
  expect(yield* worker.holds({ ...m.held.claim, worker: "another" })).toBe(false)
  expect(yield* worker.holds(null as never)).toBe(false)
  yield* worker.renewLease(m.held.claim, "1 minute")
  expect(yield* worker.holds(m.held.claim)).toBe(true)
  yield* worker.markProjected(m.held.claim)
  expect(yield* worker.holds(m.held.claim)).toBe(false)
})

describe("Outbox.withdraw and Outbox.waiting: PostgreSQL", () => {
  it.layer(substrate({}), { timeout: "60 seconds" })((it) => {
    it.effect("withdraws only what no worker holds or has settled; waiting says when each open message is due", () =>
      withdrawsOnlyWhatNoWorkerHolds)

    it.effect("bad ids are refused naming the rule, and nothing is withdrawn", () => refusesBadIds)

    it.effect("a withdrawal in a transaction that rolls back withdraws nothing; the caller's transaction stays usable", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const m = yield* messagesInEachState
        const rolledBack = yield* sql.withTransaction(Effect.gen(function*() {
          expect(yield* outbox.withdraw([m.ready])).toEqual([m.ready])
          // A refusal inside the transaction: the transaction goes on.
          expect((yield* Effect.flip(outbox.withdraw(["not an id"])))._tag).toBe("InvalidInput")
          const [row] = yield* sql<{ n: number }>`SELECT 1 AS n`
          expect(row!.n).toBe(1)
          return yield* Effect.fail("roll back" as const)
        })).pipe(Effect.flip)
        expect(rolledBack).toBe("roll back")
        expect((yield* outbox.waiting([m.ready])).map((w) => w.id)).toEqual([m.ready])
      }))

    it.effect("holds: a claim holds its row while its lease runs", () => holdsWhileItsLeaseRuns)

    it.effect("holds: in the caller's transaction the row stays locked until it ends; a lease run out holds nothing", () =>
      Effect.gen(function*() {
        const worker = yield* OutboxWorker.OutboxWorker
        const sql = yield* SqlClient.SqlClient
        const m = yield* messagesInEachState
        const held = yield* Deferred.make<boolean>()
        const done = yield* Deferred.make<void>()
        const holder = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
          yield* Deferred.succeed(held, yield* worker.holds(m.held.claim))
          yield* Deferred.await(done)
        })))
        expect(yield* Deferred.await(held)).toBe(true)
        // Another transaction cannot lock the row while the holder's is open…
        const locked = yield* Effect.flip(
          sql.withTransaction(sql`SELECT id FROM durable.outbox WHERE id = ${m.delivering}::bigint FOR UPDATE NOWAIT`)
        )
        expect(sqlStateOf(locked)).toBe("55P03") // lock_not_available
        yield* Deferred.succeed(done, undefined)
        yield* Fiber.join(holder)
        // …and can once it ended.
        yield* sql.withTransaction(
          sql`SELECT id FROM durable.outbox WHERE id = ${m.delivering}::bigint FOR UPDATE NOWAIT`
        )
        yield* sql`UPDATE durable.outbox SET claimed_until = now() - interval '1 second' WHERE id = ${m.delivering}::bigint`
        expect(yield* worker.holds(m.held.claim)).toBe(false)
      }))

    it.effect("a dead (cancelled) message is neither waiting nor withdrawn", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const admin = yield* OutboxAdmin.OutboxAdmin
        const m = yield* messagesInEachState
        yield* admin.cancel([m.ready])
        expect(yield* outbox.waiting([m.ready])).toEqual([])
        expect(yield* outbox.withdraw([m.ready])).toEqual([])
      }))
  })
})

describe("Outbox.withdraw and Outbox.waiting: in memory", () => {
  it.layer(Layer.fresh(OutboxMemory.layer()))((it) => {
    it.effect("withdraws only what no worker holds or has settled; waiting says when each open message is due", () =>
      withdrawsOnlyWhatNoWorkerHolds)

    it.effect("bad ids are refused naming the rule, and nothing is withdrawn", () => refusesBadIds)

    it.effect("holds: a claim holds its row while its lease runs", () => holdsWhileItsLeaseRuns)
  })
})
