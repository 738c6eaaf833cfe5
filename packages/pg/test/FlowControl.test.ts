// Flow limits held by the claim (migration 17): a topic's and a group's most messages in flight
// across concurrent workers (an overshoot checker inside the database counts at every claim),
// each way a slot comes back, fair share over groups (Jain's index), weights, limits set while
// messages are in flight, keyed order, unlimited topics beside limited ones, typed refusals.
import * as FlowChecker from "@effect-durable/testing/FlowChecker"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"
import * as FlowControl from "../src/FlowControl.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import {
  analyzed,
  claimLoops,
  claimOf,
  enqueueAll,
  markAll,
  nodesOfPlan,
  projectByHand,
  rowsRead,
  slotRecount,
  substrate,
  together
} from "./support.js"

/** The group each claimed message was enqueued with. */
const groupsOf = (claimed: ReadonlyArray<OutboxWorker.OutboxMessage>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    claimed.length === 0
      ? Effect.succeed([] as Array<string>)
      : Effect.map(
        sql<{ id: string; group_key: string }>`SELECT id::text AS id, group_key FROM durable.outbox
                                               WHERE id = ANY(${claimed.map((m) => m.id)}::bigint[])`,
        (rows) => {
          const byId = new Map(rows.map((r) => [r.id, r.group_key]))
          return claimed.map((m) => byId.get(m.id)!)
        }
      ))

/** Jain's fairness index of the shares: 1 when equal, 1/n when one takes everything. */
const jain = (shares: ReadonlyArray<number>) => {
  const sum = shares.reduce((a, b) => a + b, 0)
  const squares = shares.reduce((a, b) => a + b * b, 0)
  return (sum * sum) / (shares.length * squares)
}

/**
 * A statement of a deployed path of the outbox claim (`fn`: its function; `pattern` finds the
 * statement), for `topic` instead of its `limited`.
 */
const claimStatement = (fn: "outbox_claim_limited" | "outbox_claim_fair", pattern: RegExp, topic: string) =>
  Effect.map(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ source: string }>`
        SELECT prosrc AS source FROM pg_proc WHERE proname = ${fn} AND pronamespace = 'durable'::regnamespace`),
    ([deployed]) => pattern.exec(deployed!.source)![0].replaceAll("ANY(limited)", `ANY(ARRAY['${topic}'])`)
  )

describe("FlowControl: limits held by the claim", () => {
  it.layer(substrate({}, { maxConnections: 24 }), { timeout: "3 minutes", excludeTestServices: true })((it) => {
    it.effect("a topic's limit: a claim takes what is free; a mark, a release, a give-back, a cancellation and a lapsed lease each give one back", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const worker = yield* OutboxWorker.OutboxWorker
        const admin = yield* OutboxAdmin.OutboxAdmin
        const sql = yield* SqlClient.SqlClient
        yield* flow.setLimit("fc.basic", { maxInFlight: 3 })
        yield* enqueueAll("fc.basic", 20)
        const first = yield* claimOf("w1", ["fc.basic"])
        expect(first).toHaveLength(3)
        expect(yield* claimOf("w2", ["fc.basic"])).toHaveLength(0)
        expect((yield* flow.limits).find((l) => l.topic === "fc.basic")).toMatchObject({ maxInFlight: 3, inFlight: 3 })
        // A mark.
        yield* markAll([first[0]!])
        const second = yield* claimOf("w2", ["fc.basic"])
        expect(second).toHaveLength(1)
        // A release (a retry).
        yield* worker.release(first[1]!.claim, { error: "later", retryDelay: Duration.hours(1) })
        const third = yield* claimOf("w2", ["fc.basic"])
        expect(third).toHaveLength(1)
        // A give-back.
        yield* worker.giveBack([first[2]!.claim], { unstarted: true })
        const fourth = yield* claimOf("w2", ["fc.basic"])
        expect(fourth).toHaveLength(1)
        // A cancellation.
        yield* admin.cancel([second[0]!.id])
        const fifth = yield* claimOf("w2", ["fc.basic"])
        expect(fifth).toHaveLength(1)
        // A lease that ran out (its holder stalled): the slot is free again.
        yield* sql`UPDATE durable.outbox SET claimed_until = now() - interval '1 second' WHERE id = ${third[0]!.id}`
        const sixth = yield* claimOf("w3", ["fc.basic"])
        expect(sixth).toHaveLength(1)
        expect(yield* claimOf("w3", ["fc.basic"])).toHaveLength(0)
        // Raised: room at once. Cleared: no limit at all.
        yield* flow.setLimit("fc.basic", { maxInFlight: 5 })
        expect(yield* claimOf("w3", ["fc.basic"])).toHaveLength(2)
        expect(yield* flow.clear("fc.basic")).toBe(true)
        expect(yield* flow.clear("fc.basic")).toBe(false)
        expect((yield* claimOf("w3", ["fc.basic"])).length).toBeGreaterThan(5)
      }))

    it.effect("16 workers claiming at once, then claiming and marking in loops: never more than the limit in flight (checked inside every claim), every message delivered once", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* FlowChecker.install()
        yield* flow.setLimit("fc.race", { maxInFlight: 5, groupMaxInFlight: 2 })
        const ids = [
          ...(yield* enqueueAll("fc.race", 150, { group: "a" })),
          ...(yield* enqueueAll("fc.race", 150, { group: "b" })),
          ...(yield* enqueueAll("fc.race", 100))
        ]
        // All at once: exactly the limit is claimed, however the 16 interleave.
        const go = yield* Deferred.make<void>()
        const firsts = yield* Effect.all(
          Array.from({ length: 16 }, (_, i) => Effect.andThen(Deferred.await(go), claimOf(`w${i}`, ["fc.race"], 10))),
          { concurrency: "unbounded" }
        ).pipe(Effect.forkChild)
        yield* Deferred.succeed(go, undefined)
        const claimedAtOnce = (yield* Fiber.join(firsts)).flat()
        expect(claimedAtOnce).toHaveLength(5)
        yield* markAll(claimedAtOnce)
        // Then 16 loops of claim and mark until every message is delivered.
        const delivered: Array<string> = [...claimedAtOnce.map((m) => m.id)]
        yield* Effect.all(
          Array.from({ length: 16 }, (_, i) =>
            Effect.gen(function*() {
              let idle = 0
              while (idle < 50) {
                const claimed = yield* claimOf(`loop${i}`, ["fc.race"], 3)
                if (claimed.length === 0) {
                  idle++
                  yield* Effect.yieldNow
                  continue
                }
                idle = 0
                delivered.push(...claimed.map((m) => m.id))
                yield* markAll(claimed)
              }
            })),
          { concurrency: "unbounded" }
        )
        // A last sweep for what the loops left when they gave up.
        while (true) {
          const claimed = yield* claimOf("sweep", ["fc.race"], 5)
          if (claimed.length === 0) break
          delivered.push(...claimed.map((m) => m.id))
          yield* markAll(claimed)
        }
        expect(delivered.slice().sort()).toEqual(ids.slice().sort())
        expect(yield* FlowChecker.overshoots()).toEqual([])
      }))

    it.effect("the checker itself: a claim that ignores the limits (rows leased by hand, as a rogue or a buggy claim would) is caught", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const sql = yield* SqlClient.SqlClient
        yield* FlowChecker.install()
        yield* flow.setLimit("fc.checker", { maxInFlight: 2 })
        yield* enqueueAll("fc.checker", 5)
        yield* sql`UPDATE durable.outbox SET claimed_by = 'rogue', claimed_until = now() + interval '1 minute',
                                             claim_generation = claim_generation + 1
                    WHERE topic = 'fc.checker'`
        // Counted after the statement, once for the topic it claimed from: 5 in flight against 2.
        expect((yield* FlowChecker.overshoots()).filter((o) => o.topic === "fc.checker")).toEqual([
          { queue: "outbox", topic: "fc.checker", group: "", inFlight: 5, limit: 2 }
        ])
        yield* sql`DELETE FROM durable.flow_overshoots`
      }))

    it.effect("the checker counts leases by the clock once it holds its lock, not by its transaction's start: a lease that ran out after the checked claim's transaction began is free room (a claim that went first may have taken it), and one still running is counted", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const sql = yield* SqlClient.SqlClient
        yield* FlowChecker.install()
        yield* flow.setLimit("fc.checker.clock", { maxInFlight: 2 })
        const [first, second, third] = yield* enqueueAll("fc.checker.clock", 3)
        const claimByHand = (id: string, lease: string) =>
          sql`UPDATE durable.outbox SET claimed_by = 'hand', claim_generation = claim_generation + 1,
                                        claimed_until = clock_timestamp() + ${lease}::interval
               WHERE id = ${id}`
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT now()`
          // Two held, the first for 50 ms from (after) this transaction's start.
          yield* claimByHand(first!, "50 milliseconds")
          yield* claimByHand(second!, "1 minute")
          yield* Effect.repeat(
            sql<
              { out: boolean }
            >`SELECT clock_timestamp() > claimed_until AS out FROM durable.outbox WHERE id = ${first}`,
            { until: ([row]) => row!.out, schedule: Schedule.spaced("10 millis") }
          )
          // The first lease ran out by the clock, though not by now(): two in flight, at the limit.
          yield* claimByHand(third!, "1 minute")
        }))
        expect((yield* FlowChecker.overshoots()).filter((o) => o.topic === "fc.checker.clock")).toEqual([])
        // Taken again, the first makes three against two.
        yield* claimByHand(first!, "1 minute")
        expect((yield* FlowChecker.overshoots()).filter((o) => o.topic === "fc.checker.clock")).toEqual([
          { queue: "outbox", topic: "fc.checker.clock", group: "", inFlight: 3, limit: 2 }
        ])
        yield* sql`DELETE FROM durable.flow_overshoots`
      }))

    it.effect("a lease that ran out on a limited topic is not renewed (its slot may be another claim's now); on a topic without limits it still is", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const worker = yield* OutboxWorker.OutboxWorker
        const sql = yield* SqlClient.SqlClient
        yield* flow.setLimit("fc.renew", { maxInFlight: 1 })
        yield* enqueueAll("fc.renew", 2)
        yield* enqueueAll("fc.renew.free", 1)
        const [stalled] = yield* claimOf("stalled", ["fc.renew"])
        const [free] = yield* claimOf("stalled", ["fc.renew.free"])
        // Both holders stall past their leases: the limited slot is free for any claim from then on.
        yield* sql`UPDATE durable.outbox SET claimed_until = now() - interval '1 second'
                    WHERE id IN (${stalled!.id}, ${free!.id})`
        // The stalled holder wakes and renews: refused on the limited topic, in one statement or alone.
        const renewed = yield* worker.renewLeases([stalled!.claim, free!.claim], "1 minute")
        expect([renewed.applied, renewed.rejected.map((r) => r.messageId)]).toEqual([[free!.id], [stalled!.id]])
        expect((yield* Effect.flip(worker.renewLease(stalled!.claim, "1 minute")))._tag).toBe("ClaimMismatch")
        // So the slot is another claim's, and one is in flight, not two.
        expect(yield* claimOf("other", ["fc.renew"])).toHaveLength(1)
        expect((yield* flow.limits).find((l) => l.topic === "fc.renew")!.inFlight).toBe(1)
      }))

    it.effect("a renewal looks at the clock, not its statement's start: one that began before its lease ran out and ran after is refused on a limited topic; so is one with under a sixth of a lease left", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const worker = yield* OutboxWorker.OutboxWorker
        const sql = yield* SqlClient.SqlClient
        yield* flow.setLimit("fc.clock", { maxInFlight: 5 })
        yield* enqueueAll("fc.clock", 3)
        const [late, close, fine] = yield* claimOf("holder", ["fc.clock"])
        // Late: the renewal's transaction begins while the lease still runs (now() is fixed
        // there), and renews after it ran out — a backend starved or queued between the two.
        yield* sql`UPDATE durable.outbox SET claimed_until = clock_timestamp() + interval '200 milliseconds'
                    WHERE id = ${late!.id}`
        const lateRenewal = yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT now()`
          yield* sql`SELECT pg_sleep(0.4)`
          return yield* worker.renewLeases([late!.claim], "1 minute")
        }))
        expect(lateRenewal.rejected.map((r) => r.messageId)).toEqual([late!.id])
        // Close: 5 s left of a lease of a minute (under its sixth, 10 s) — refused; 20 s left: renewed.
        yield* sql`UPDATE durable.outbox SET claimed_until = clock_timestamp() + interval '5 seconds' WHERE id = ${
          close!.id
        }`
        yield* sql`UPDATE durable.outbox SET claimed_until = clock_timestamp() + interval '20 seconds' WHERE id = ${
          fine!.id
        }`
        const renewed = yield* worker.renewLeases([close!.claim, fine!.claim], "1 minute")
        expect([renewed.applied, renewed.rejected.map((r) => r.messageId)]).toEqual([[fine!.id], [close!.id]])
        expect((yield* Effect.flip(worker.renewLease(close!.claim, "1 minute")))._tag).toBe("ClaimMismatch")
        yield* worker.renewLease(fine!.claim, "1 minute")
      }))

    it.effect("per-group limits: the topic's per-group limit, a group's own limit (a tier), messages without a group under the topic's limit only", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* flow.setLimit("fc.groups", { maxInFlight: 20, groupMaxInFlight: 2 })
        yield* flow.setGroup("fc.groups", "gold", { maxInFlight: 5 })
        yield* enqueueAll("fc.groups", 10, { group: "free" })
        yield* enqueueAll("fc.groups", 10, { group: "gold" })
        yield* enqueueAll("fc.groups", 4)
        const claimed = yield* claimOf("w", ["fc.groups"])
        const groups = yield* groupsOf(claimed)
        const count = (g: string) => groups.filter((x) => x === g).length
        expect([count("free"), count("gold"), count("")]).toEqual([2, 5, 4])
        expect(yield* claimOf("w", ["fc.groups"])).toHaveLength(0)
        const listed = (yield* flow.limits).find((l) => l.topic === "fc.groups")
        expect(listed).toMatchObject({
          maxInFlight: 20,
          groupMaxInFlight: 2,
          inFlight: 11,
          groups: [{ group: "gold", maxInFlight: 5, weight: 1 }]
        })
      }))

    it.effect("fair share: one group with 2,000 ready messages does not hold up ten groups with 3 each (every light message within the first rounds; Jain's index over the busy rounds)", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* flow.setLimit("fc.fair", { maxInFlight: 6 })
        // The heavy group's backlog is older than every light message.
        yield* enqueueAll("fc.fair", 2000, { group: "heavy" })
        for (let g = 0; g < 10; g++) yield* enqueueAll("fc.fair", 3, { group: `light${g}` })
        const rounds: Array<Array<string>> = []
        while (rounds.length < 12) {
          const claimed = yield* claimOf("w", ["fc.fair"], 100)
          rounds.push(yield* groupsOf(claimed))
          yield* markAll(claimed)
        }
        // 30 light messages and the heavy group's share: every light message is out by round 6
        // (31 shares of 6 slots), none waits behind the 2,000.
        const lastLight = Math.max(...rounds.map((r, i) => r.some((g) => g.startsWith("light")) ? i : -1))
        expect(lastLight).toBeLessThanOrEqual(5)
        expect(rounds.slice(0, 5).every((r) => r.length === 6)).toBe(true)
        // Slots per group over the rounds where all eleven had messages ready.
        const busy = rounds.slice(0, 3).flat()
        const shares = ["heavy", ...Array.from({ length: 10 }, (_, g) => `light${g}`)].map((g) =>
          busy.filter((x) => x === g).length
        )
        const index = jain(shares)
        expect(index).toBeGreaterThan(0.9)
        // Work-conserving: with the light groups done, the heavy one gets every slot.
        expect(rounds[11]).toEqual(Array(6).fill("heavy"))
      }))

    it.effect("weights: a group of weight 3 gets three slots to another's one while both have messages ready", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* flow.setLimit("fc.weights", { maxInFlight: 4 })
        yield* flow.setGroup("fc.weights", "gold", { weight: 3 })
        yield* enqueueAll("fc.weights", 200, { group: "basic" })
        yield* enqueueAll("fc.weights", 200, { group: "gold" })
        const all: Array<string> = []
        for (let round = 0; round < 20; round++) {
          const claimed = yield* claimOf("w", ["fc.weights"])
          all.push(...(yield* groupsOf(claimed)))
          yield* markAll(claimed)
        }
        expect([all.filter((g) => g === "gold").length, all.filter((g) => g === "basic").length]).toEqual([60, 20])
      }))

    it.effect("a limit set while messages are in flight counts them; a limited topic at its limit does not hold up other topics in the same claim", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* enqueueAll("fc.late", 10)
        const before = yield* claimOf("w", ["fc.late"], 4)
        expect(before).toHaveLength(4)
        yield* flow.setLimit("fc.late", { maxInFlight: 5 })
        expect(yield* claimOf("w", ["fc.late"])).toHaveLength(1)
        // The limited topic's older backlog first in id order; an unlimited topic behind it.
        yield* enqueueAll("fc.other", 7)
        const both = yield* claimOf("w", ["fc.late", "fc.other"])
        expect(both.map((m) => m.topic)).toEqual(Array(7).fill("fc.other"))
      }))

    it.effect("keyed messages of a limited topic keep their order: a key's next message waits for its head to settle", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* flow.setLimit("fc.keys", { maxInFlight: 10 })
        const outbox = yield* Outbox.Outbox
        const ids = yield* outbox.enqueueMany([
          { topic: "fc.keys", payload: 1, options: { orderingKey: "k" } },
          { topic: "fc.keys", payload: 2, options: { orderingKey: "k" } },
          { topic: "fc.keys", payload: 3 }
        ])
        const first = yield* claimOf("w", ["fc.keys"])
        expect(first.map((m) => m.id)).toEqual([ids[0], ids[2]])
        expect(yield* claimOf("w", ["fc.keys"])).toEqual([])
        yield* markAll([first[0]!])
        expect((yield* claimOf("w", ["fc.keys"])).map((m) => m.id)).toEqual([ids[1]])
      }))

    it.effect("a limited claim counts what it took message by message when it must: it probes the messages recorded, never the topic's backlog (migrations 22, 26, 27)", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const topic = "limits.prune"
        yield* outbox.enqueueMany(Array.from({ length: 5_000 }, (_, i) => ({ topic, payload: { i } })))
        yield* flow.setLimit(topic, { maxInFlight: 1_000 })
        const claimed = yield* worker.claim({ worker: "w", topics: [topic], limit: 200, lease: "1 minute" })
        expect(claimed).toHaveLength(200)
        yield* markAll(claimed.slice(0, 100))
        // The claim function's exact count, as deployed, run under EXPLAIN ANALYZE for this topic
        // as a claim of 1,000 would (200 recorded + 1,000 asked is more than the limit: it counts)
        // and rolled back: the outbox rows it reads.
        const plan = yield* analyzed(
          (yield* claimStatement("outbox_claim_limited", /WITH need AS[\s\S]*?(?=;)/, topic)).replaceAll("$2", "1000")
        )
        // One probe of the outbox per message recorded (200; 100 of them settled), and no scan of
        // it run once over more rows than that. Before version 22 the anti-join scanned every
        // open message once (4,900 here). (Loops are counted, not rows: EXPLAIN gives rows per
        // loop as an average, rounded to whole numbers before PostgreSQL 18.)
        const scans = nodesOfPlan(plan).filter((node) => node["Relation Name"] === "outbox")
        expect(scans.length).toBeGreaterThan(0)
        expect(scans.reduce((sum, node) => sum + (node["Actual Loops"] ?? 0), 0)).toBeLessThanOrEqual(200)
        expect(rowsRead(plan, (node) => scans.includes(node) && node["Actual Loops"] === 1)).toBeLessThanOrEqual(200)
        // The same for the count of one claim row by a claim that takes slots (migration 27; the
        // claim of 200 is one row, in one of the limit's four slots).
        const slotPlan = yield* analyzed(
          yield* slotRecount(
            "outbox_claim_slots",
            `SELECT * FROM durable.flow_claims WHERE topic = '${topic}' ORDER BY id`
          )
        )
        const slotScans = nodesOfPlan(slotPlan).filter((node) => node["Relation Name"] === "outbox")
        expect(slotScans.length).toBeGreaterThan(0)
        expect(slotScans.reduce((sum, node) => sum + (node["Actual Loops"] ?? 0), 0)).toBeLessThanOrEqual(200)
        expect(rowsRead(slotPlan, (node) => slotScans.includes(node) && node["Actual Loops"] === 1))
          .toBeLessThanOrEqual(200)
        yield* markAll(claimed.slice(100))
        yield* flow.clear(topic)
      }))

    it.effect("a topic with only an in-flight limit (the short way, migration 26): 16 workers at once take exactly the limit, then 16 loops with keyed runs never pass it (checked inside every claim), every message once and each key in order", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const sql = yield* SqlClient.SqlClient
        yield* FlowChecker.install()
        const topic = "fc.single"
        yield* flow.setLimit(topic, { maxInFlight: 7 })
        const ids = [
          ...(yield* enqueueAll(topic, 150)),
          ...(yield* Effect.forEach(
            Array.from({ length: 150 }, (_, i) => i),
            (i) => Effect.flatMap(Outbox.Outbox, (outbox) => outbox.enqueue(topic, { i }, { orderingKey: `k${i % 5}` }))
          ))
        ]
        const firsts = (yield* together(16, (i) => claimOf(`w${i}`, [topic], 10))).flat()
        expect(firsts).toHaveLength(7)
        yield* markAll(firsts)
        const order: Array<string> = []
        let longestRun = 0
        const loops = yield* claimLoops(16, ids.length - 7, (i) =>
          Effect.tap(
            Effect.flatMap(OutboxWorker.OutboxWorker, (w) =>
              w.claim({ worker: `v${i}`, topics: [topic], limit: 4, lease: "1 minute", perKey: 3 })),
            (claimed) =>
              Effect.sync(() => {
                order.push(...claimed.map((m) =>
                  m.id
                ))
                const perKey = new Map<string, number>()
                for (const m of claimed) {
                  if (m.orderingKey !== null) perKey.set(m.orderingKey, (perKey.get(m.orderingKey) ?? 0) + 1)
                }
                longestRun = Math.max(longestRun, ...perKey.values())
              })
          ), markAll)
        // Keyed runs: the short way is the claim of topics without limits (the long way takes heads only).
        expect(longestRun).toBeGreaterThan(1)
        expect([...firsts.map((m) => m.id), ...loops].sort()).toEqual([...ids].sort())
        expect((yield* FlowChecker.overshoots()).filter((o) => o.topic === topic)).toEqual([])
        // Each key's messages were claimed in their order (a run never overtakes its head).
        const keyed = yield* sql<{ id: string; ordering_key: string }>`
          SELECT id::text AS id, ordering_key FROM durable.outbox WHERE topic = ${topic} AND ordering_key IS NOT NULL`
        const keyOf = new Map(keyed.map((row) => [row.id, row.ordering_key]))
        for (const key of ["k0", "k1", "k2", "k3", "k4"]) {
          const claimedOrder = order.filter((id) => keyOf.get(id) === key)
          expect(claimedOrder).toEqual([...claimedOrder].sort((a, b) => Number(a) - Number(b)))
        }
        yield* flow.clear(topic)
      }))

    it.effect("a limit that never binds: a row per claim and group, counted exactly only when the rows pile up or the room runs short (migration 26)", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const sql = yield* SqlClient.SqlClient
        const topic = "limits.rows"
        yield* flow.setLimit(topic, { maxInFlight: 100_000 })
        yield* enqueueAll(topic, 100, { group: "a" })
        yield* enqueueAll(topic, 100)
        const rows = sql<{ n: number; groups: number }>`
          SELECT count(*)::int AS n, count(DISTINCT group_key)::int AS groups FROM durable.flow_claims
           WHERE topic = ${topic}`
        // One claim of both groups: a row for each.
        const first = yield* claimOf("w", [topic], 10)
        expect(first).toHaveLength(10)
        expect(yield* rows).toEqual([{ n: 2, groups: 2 }])
        yield* markAll(first)
        let most = 0
        for (let i = 0; i < 60; i++) {
          yield* markAll(yield* claimOf("w", [topic], 3))
          most = Math.max(most, (yield* rows)[0]!.n)
        }
        // Past 32 rows a claim counted them and dropped those with nothing held.
        expect(most).toBeLessThanOrEqual(34)
        expect(most).toBeGreaterThan(2)
        expect((yield* flow.limits).find((l) => l.topic === topic)!.inFlight).toBe(0)
        // Short of room, a claim counts exactly first: every earlier message settled, 2 more fit.
        yield* flow.setLimit(topic, { maxInFlight: 2 })
        expect(yield* claimOf("w", [topic], 2)).toHaveLength(2)
        expect(yield* claimOf("w", [topic], 2)).toHaveLength(0)
        yield* flow.clear(topic)
        expect(yield* rows).toEqual([{ n: 0, groups: 0 }])
      }))

    it.effect("a limited claim finds the named groups without reading the topic's messages without a group (migration 23)", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const outbox = yield* Outbox.Outbox
        const topic = "limits.named"
        yield* outbox.enqueueMany(Array.from({ length: 5_000 }, (_, i) => ({ topic, payload: { i } })))
        yield* outbox.enqueueMany(["b", "a"].map((group) => ({ topic, payload: { group }, options: { group } })))
        yield* flow.setLimit(topic, { maxInFlight: 1_000 })
        // The claim's walk over the topic's named groups, as deployed, on its own.
        const walk = yield* claimStatement("outbox_claim_fair", /named AS \([\s\S]*?\)(?=,\ngrouped AS)/, topic)
        const plan = yield* analyzed(`WITH RECURSIVE ${walk} SELECT * FROM named`)
        expect(nodesOfPlan(plan)[0]!["Actual Rows"]).toBe(2)
        // Each step one descent of the group index. Before version 23 the first step read the
        // 5,000 messages without a group (filtered out one by one) to find group "a".
        const read = rowsRead(plan, (node) => node["Relation Name"] === "outbox" && node["Actual Loops"] === 1)
        expect(read).toBeLessThanOrEqual(10)
        yield* flow.clear(topic)
        yield* projectByHand(`q.topic = '${topic}'`)
      }))

    it.effect("bad limits are typed refusals naming the rule; nothing is written", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const refusal = (effect: Effect.Effect<unknown, unknown>) => Effect.map(Effect.flip(effect), (e) => e)
        for (const bad of [0, -1, 1.5, Number.NaN, Infinity, 2_000_000]) {
          expect(yield* refusal(flow.setLimit("fc.bad", { maxInFlight: bad }))).toMatchObject({
            _tag: "InvalidInput",
            argument: "maxInFlight"
          })
        }
        expect(yield* refusal(flow.setLimit("", { maxInFlight: 1 }))).toMatchObject({ argument: "topic" })
        expect(yield* refusal(flow.setLimit("fc.bad", { maxInFlight: 1, maxInflight: 2 } as never))).toMatchObject({
          argument: "options.maxInflight"
        })
        expect(yield* refusal(flow.setGroup("fc.bad", "g", { weight: 0 }))).toMatchObject({ argument: "weight" })
        expect(yield* refusal(flow.setGroup("fc.bad", "a\u0000b", {}))).toMatchObject({ argument: "group" })
        const outbox = yield* Outbox.Outbox
        expect(yield* refusal(outbox.enqueue("fc.bad", {}, { group: "x".repeat(129) }))).toMatchObject({
          argument: "group"
        })
        expect((yield* flow.limits).some((l) => l.topic === "fc.bad")).toBe(false)
      }))
  })
})
