import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "../src/DurableConfig.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxMemory from "../src/OutboxMemory.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { barrier, nodesOfPlan, rowsRead, substrate } from "./support.js"

const freshTopic = () => TestSubstrate.freshName("runs")

const claim = (worker: string, topic: string, limit: number, perKey: number) =>
  Effect.flatMap(
    OutboxWorker.OutboxWorker,
    (outbox) => outbox.claim({ worker, topics: [topic], limit, lease: "30 seconds", perKey })
  )

/** The claim rule, asserted on any driver of the outbox (PostgreSQL and memory alike). */
const runsScenario = Effect.gen(function*() {
  const outbox = yield* Outbox.Outbox
  const worker = yield* OutboxWorker.OutboxWorker
  const topic = freshTopic()
  const [a1, a2, a3, a4, b1, b2, free, c1, c2] = yield* outbox.enqueueMany([
    { topic, payload: "a1", options: { orderingKey: `${topic}-a` } },
    { topic, payload: "a2", options: { orderingKey: `${topic}-a` } },
    { topic, payload: "a3", options: { orderingKey: `${topic}-a` } },
    // Not ready: the run of key a stops before it, and a4's successors are never taken either.
    { topic, payload: "a4", options: { orderingKey: `${topic}-a`, delay: "1 hour" } },
    { topic, payload: "b1", options: { orderingKey: `${topic}-b` } },
    { topic, payload: "b2", options: { orderingKey: `${topic}-b` } },
    { topic, payload: "free" },
    { topic, payload: "c1", options: { orderingKey: `${topic}-c` } },
    { topic, payload: "c2", options: { orderingKey: `${topic}-c` } }
  ])
  yield* outbox.enqueue(topic, "a5", { orderingKey: `${topic}-a` })
  // perKey 1 is the head of each key only.
  const heads = yield* claim("w0", topic, 10, 1)
  expect(heads.map((m) => m.id)).toEqual([a1, b1, free, c1])
  yield* worker.giveBack(heads.map((m) => m.claim))
  // Limit 6: every head first, then the second of each key by id (breadth-first), in id order.
  const cut = yield* claim("w1", topic, 6, 10)
  expect(cut.map((m) => m.id)).toEqual([a1, a2, b1, b2, free, c1])
  yield* worker.giveBack(cut.map((m) => m.claim))
  const all = yield* claim("w2", topic, 100, 10)
  expect(all.map((m) => m.id)).toEqual([a1, a2, a3, b1, b2, free, c1, c2])
  // While the runs are held, no other claim takes any message of their keys.
  expect(yield* claim("w3", topic, 100, 10)).toEqual([])
  void a4
})

describe("keyed runs (PostgreSQL)", () => {
  it.layer(substrate(), { timeout: "120 seconds" })((it) => {
    it.effect(
      "a claim with perKey takes each key's run in id order up to its first message that is not ready, the limit cutting runs breadth-first",
      () => runsScenario
    )

    it.effect("a run stops at a message another transaction holds locked: never a message past it", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const table = (yield* DurableSettings).table("outbox")
        const topic = freshTopic()
        const [k1, k2, k3, k4] = yield* outbox.enqueueMany(
          [1, 2, 3, 4].map((i) => ({ topic, payload: i, options: { orderingKey: `${topic}-k` } }))
        )
        const locked = yield* Deferred.make<void>()
        const done = yield* Deferred.make<void>()
        const holder = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT id FROM ${sql.literal(table)} WHERE id = ${k3!} FOR UPDATE`
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(done)
        })))
        yield* Deferred.await(locked)
        const run = yield* claim("w1", topic, 10, 10)
        expect(run.map((m) => m.id)).toEqual([k1, k2])
        yield* Deferred.succeed(done, undefined)
        yield* Fiber.join(holder)
        void k4
      }))

    it.effect(
      "concurrent claims with keyed runs never split a key: each key's claimed messages are one holder's prefix of it",
      () =>
        Effect.gen(function*() {
          const outbox = yield* Outbox.Outbox
          const topic = freshTopic()
          const keys = Array.from({ length: 20 }, (_, k) => `key-${k}`)
          // Interleaved, so every claim sees many keys.
          const ids = yield* outbox.enqueueMany(
            Array.from({ length: 10 }, (_, i) =>
              keys.map((key) => ({ topic, payload: i, options: { orderingKey: key } })))
              .flat()
          )
          const keyOf = new Map(ids.map((id, i) => [id, keys[i % keys.length]!]))
          const gate = yield* barrier
          const fibers = yield* Effect.forEach(
            Array.from({ length: 8 }, (_, w) =>
              w),
            (w) => Effect.forkChild(Effect.andThen(gate.wait, claim(`w${w}`, topic, 30, 10)))
          )
          yield* gate.open
          const claims = yield* Fiber.joinAll(fibers)
          const holders = new Map<string, Set<string>>()
          const claimedOfKey = new Map<string, Array<string>>()
          for (const [w, messages] of claims.entries()) {
            for (const message of messages) {
              const key = keyOf.get(message.id)!
              expect(message.orderingKey).toBe(key)
              holders.set(key, (holders.get(key) ?? new Set()).add(`w${w}`))
              claimedOfKey.set(key, [...(claimedOfKey.get(key) ?? []), message.id])
            }
          }
          const claimedCount = claims.reduce((n, messages) => n + messages.length, 0)
          expect(claimedCount).toBeGreaterThan(keys.length)
          for (const [key, claimed] of claimedOfKey) {
            expect(holders.get(key)!.size).toBe(1)
            const ofKey = ids.filter((id) => keyOf.get(id) === key)
            expect(claimed.sort((a, b) => Number(a) - Number(b))).toEqual(ofKey.slice(0, claimed.length))
          }
        })
    )

    it.effect("a claim of keyed runs updates its rows by id and probes keys through the key index: it never reads the whole open backlog (migrations 20, 24)", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const admin = yield* OutboxAdmin.OutboxAdmin
        const topic = freshTopic()
        const keys = Array.from({ length: 50 }, (_, k) => `${topic}-${k}`)
        yield* outbox.enqueueMany(
          Array.from(
            { length: 100 },
            (_, i) => keys.map((key) => ({ topic, payload: i, options: { orderingKey: key } }))
          )
            .flat()
        )
        const plan = yield* admin.explainClaim(
          { worker: "w", topics: [topic], limit: 500, lease: "30 seconds", perKey: 500 },
          { analyze: true }
        )
        expect(nodesOfPlan(plan)[0]!["Actual Rows"]).toBe(500)
        // The rows the claim's scans of the open messages in id or group order returned (not
        // its probes of a key's earlier messages, which one claim in 16 makes for every keyed
        // row): the window (1,000), the heads, the runs it locked and the rows it took, about
        // 2,000. Joined with the outbox, its 500 rows were found by returning all 5,000 open
        // messages (2.4 s for a backlog of 10,000).
        const readOfOpen = rowsRead(
          plan,
          (node) => /^outbox_open(_group)?(_due)?_idx$/.test(node["Index Name"] ?? "") && node["Actual Loops"] === 1,
          false
        )
        expect(readOfOpen).toBeGreaterThan(0)
        expect(readOfOpen).toBeLessThan(4_000)
        // Every probe of the outbox the claim repeats (a key's earlier open message for each
        // keyed row it reads, a run behind each head) goes through the key index: one descent
        // each. Before version 24 the first went through the group index, bounded by the id
        // only (24 rows read per probe here).
        const repeated = nodesOfPlan(plan).filter((node) =>
          node["Relation Name"] === "outbox" && (node["Actual Loops"] ?? 0) > 1
        )
        expect(repeated.length).toBeGreaterThan(0)
        expect(repeated.map((node) => node["Index Name"])).toEqual(repeated.map(() => "outbox_open_key_idx"))
      }))
  })
})

describe("keyed runs (memory)", () => {
  it.layer(Layer.mergeAll(OutboxMemory.layer()), { timeout: "30 seconds" })((it) => {
    it.effect("the memory outbox claims keyed runs by the same rule as PostgreSQL", () => runsScenario)
  })
})
