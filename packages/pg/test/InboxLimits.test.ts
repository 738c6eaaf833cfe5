// Limits on the stored inbox (migration 25): a consumer's most entries in flight across
// concurrent workers (the overshoot checker counts inside every claim), each way a slot comes
// back, a token bucket on the database's clock, a limit set while entries are in flight, lapsed
// leases not renewed, other consumers untouched, typed refusals.
import * as FlowChecker from "@effect-durable/testing/FlowChecker"
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as FlowControl from "../src/FlowControl.js"
import * as Inbox from "../src/Inbox.js"
import * as InboxAdmin from "../src/InboxAdmin.js"
import * as InboxWorker from "../src/InboxWorker.js"
import { analyzed, claimLoops, nodesOfPlan, rowsRead, slotRecount, substrate, together } from "./support.js"

/** Stores `n` deliveries for `consumer`; their entry ids, in order. */
const receiveAll = (consumer: string, n: number) =>
  Effect.gen(function*() {
    const inbox = yield* Inbox.Inbox
    const sql = yield* SqlClient.SqlClient
    for (let i = 0; i < n; i++) yield* inbox.receive(consumer, `${consumer}-${i}`, { i })
    const rows = yield* sql<{ id: string }>`SELECT id::text AS id FROM durable.inbox WHERE consumer = ${consumer}
                                             ORDER BY id`
    return rows.map((r) => r.id)
  })

const claimOf = (worker: string, consumer: string, limit = 100, lease: Duration.Input = "1 minute") =>
  Effect.flatMap(InboxWorker.InboxWorker, (w) => w.claim({ consumer, worker, limit, lease }))

const completeAll = (entries: ReadonlyArray<InboxWorker.InboxEntry>) =>
  Effect.flatMap(
    InboxWorker.InboxWorker,
    (w) => entries.length === 0 ? Effect.void : Effect.asVoid(w.completeMany(entries.map((e) => e.claim)))
  )

/** What `seconds` of waiting would do to a consumer's bucket: its clock moved back. */
const elapse = (consumer: string, seconds: number) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`UPDATE durable.inbox_limits SET tokens_at = tokens_at - make_interval(secs => ${seconds})
         WHERE consumer = ${consumer}`
  )

describe("FlowControl: limits on the stored inbox", () => {
  it.layer(substrate({}, { maxConnections: 24 }), { timeout: "3 minutes", excludeTestServices: true })((it) => {
    it.effect("a consumer's limit: a claim takes what is free; a completion, a release, a give-back, a cancellation and a lapsed lease each give one back; other consumers are untouched", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const worker = yield* InboxWorker.InboxWorker
        const admin = yield* InboxAdmin.InboxAdmin
        const sql = yield* SqlClient.SqlClient
        yield* flow.setInboxLimit("il.basic", { maxInFlight: 3, by: "test" })
        yield* receiveAll("il.basic", 20)
        yield* receiveAll("il.free", 20)
        const first = yield* claimOf("w1", "il.basic")
        expect(first).toHaveLength(3)
        expect(yield* claimOf("w2", "il.basic")).toHaveLength(0)
        expect(yield* flow.inboxLimits).toEqual([
          expect.objectContaining({ consumer: "il.basic", maxInFlight: 3, inFlight: 3, rate: null, updatedBy: "test" })
        ])
        // Another consumer has no limit.
        expect(yield* claimOf("w1", "il.free")).toHaveLength(20)
        // A completion.
        yield* completeAll([first[0]!])
        const second = yield* claimOf("w2", "il.basic")
        expect(second).toHaveLength(1)
        // A release (a retry later).
        yield* worker.release(first[1]!.claim, { error: "later", retryDelay: Duration.hours(1) })
        const third = yield* claimOf("w2", "il.basic")
        expect(third).toHaveLength(1)
        // A give-back.
        yield* worker.giveBack([first[2]!.claim], { unstarted: true })
        const fourth = yield* claimOf("w2", "il.basic")
        expect(fourth).toHaveLength(1)
        // A cancellation.
        yield* admin.cancel([second[0]!.id])
        const fifth = yield* claimOf("w2", "il.basic")
        expect(fifth).toHaveLength(1)
        // A lease that ran out (its holder stalled).
        yield* sql`UPDATE durable.inbox SET claimed_until = now() - interval '1 second' WHERE id = ${third[0]!.id}`
        const sixth = yield* claimOf("w3", "il.basic")
        expect(sixth).toHaveLength(1)
        expect(yield* claimOf("w3", "il.basic")).toHaveLength(0)
        // Raised: room at once. Cleared: no limit at all.
        yield* flow.setInboxLimit("il.basic", { maxInFlight: 5 })
        expect(yield* claimOf("w3", "il.basic")).toHaveLength(2)
        expect(yield* flow.clearInbox("il.basic")).toBe(true)
        expect(yield* flow.clearInbox("il.basic")).toBe(false)
        expect(yield* flow.inboxLimits).toEqual([])
        expect((yield* claimOf("w3", "il.basic")).length).toBeGreaterThan(5)
        // The topic of the same name is a different thing: the outbox's limits did not change.
        expect(yield* flow.limits).toEqual([])
      }))

    it.effect("16 workers claiming at once, then claiming and completing in loops: never more than the limit in flight (checked inside every claim), every entry processed once", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* FlowChecker.install()
        yield* flow.setInboxLimit("il.race", { maxInFlight: 5 })
        const ids = yield* receiveAll("il.race", 300)
        // All at once: exactly the limit is claimed, however the 16 interleave.
        const claimed = (yield* together(16, (i) => claimOf(`w${i}`, "il.race", 10))).flat()
        expect(claimed).toHaveLength(5)
        yield* completeAll(claimed)
        // Then 16 loops of claim and complete until every entry is processed.
        const processed = [
          ...claimed.map((e) => e.id),
          ...(yield* claimLoops(16, ids.length - 5, (i) => claimOf(`v${i}`, "il.race", 3), completeAll))
        ]
        expect([...processed].sort()).toEqual([...ids].sort())
        expect(yield* FlowChecker.overshoots()).toEqual([])
      }))

    it.effect("the checker itself: entries claimed past the limit behind the claim's back are caught", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const sql = yield* SqlClient.SqlClient
        yield* FlowChecker.install()
        yield* flow.setInboxLimit("il.checker", { maxInFlight: 2 })
        yield* receiveAll("il.checker", 5)
        // A claim that knows no limits (version 8's), written out.
        yield* sql`UPDATE durable.inbox SET claimed_by = 'rogue', claimed_until = now() + interval '1 minute',
                                           claim_generation = claim_generation + 1
                    WHERE consumer = 'il.checker'`
        // Counted after the statement, once for the consumer it claimed from: 5 in flight against 2.
        expect((yield* FlowChecker.overshoots()).filter((o) => o.topic === "il.checker")).toEqual([
          { queue: "inbox", topic: "il.checker", group: "", inFlight: 5, limit: 2 }
        ])
        yield* sql`DELETE FROM durable.flow_overshoots`
      }))

    it.effect("a consumer's rate: a burst at once, then a token per period; with an in-flight limit, the least of the two", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* flow.setInboxLimit("il.rate", { rate: { limit: 10, per: "1 hour", burst: 3 } })
        yield* receiveAll("il.rate", 20)
        const first = yield* claimOf("w1", "il.rate")
        expect(first).toHaveLength(3)
        // Settled or not, nothing more until the bucket refills: a rate is not a slot.
        yield* completeAll(first)
        expect(yield* claimOf("w1", "il.rate")).toHaveLength(0)
        const listed = (yield* flow.inboxLimits).find((l) => l.consumer === "il.rate")!
        expect(listed).toMatchObject({ rate: { limit: 10, perMillis: 3_600_000, burst: 3 }, maxInFlight: null })
        expect(listed.tokens).toBeGreaterThanOrEqual(0)
        expect(listed.tokens).toBeLessThan(1)
        // Six minutes is one token at 10 an hour; thirteen, two; an hour, the burst (never more).
        yield* elapse("il.rate", 6 * 60)
        const one = yield* claimOf("w1", "il.rate")
        expect(one).toHaveLength(1)
        yield* elapse("il.rate", 13 * 60)
        const two = yield* claimOf("w1", "il.rate")
        expect(two).toHaveLength(2)
        yield* elapse("il.rate", 3600)
        const full = yield* claimOf("w1", "il.rate")
        expect(full).toHaveLength(3)
        yield* completeAll([...one, ...two])
        // Both: a full bucket of 3 and 1 in flight at most.
        yield* flow.setInboxLimit("il.rate", { maxInFlight: 1, rate: { limit: 10, per: "1 hour", burst: 3 } })
        yield* elapse("il.rate", 3600)
        expect(yield* claimOf("w1", "il.rate")).toHaveLength(0)
        yield* completeAll(full)
        expect(yield* claimOf("w1", "il.rate")).toHaveLength(1)
        // A rate removed: the in-flight limit alone.
        yield* flow.setInboxLimit("il.rate", { maxInFlight: 4 })
        expect(yield* claimOf("w1", "il.rate")).toHaveLength(3)
      }))

    it.effect("16 workers claiming in loops on real time: every span of claims within the consumer's bucket (checked inside the database), every entry once", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* FlowChecker.install()
        yield* flow.setInboxLimit("il.paced", { rate: { limit: 40, per: "1 second", burst: 8 } })
        const ids = yield* receiveAll("il.paced", 80)
        const processed = yield* claimLoops(16, ids.length, (i) => claimOf(`w${i}`, "il.paced", 5), completeAll)
        expect([...processed].sort()).toEqual([...ids].sort())
        expect((yield* FlowChecker.rateOvershoots()).filter((o) => o.topic === "il.paced")).toEqual([])
      }))

    it.effect("a limit set while entries are in flight counts them", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* receiveAll("il.late", 10)
        const before = yield* claimOf("w1", "il.late", 4)
        expect(before).toHaveLength(4)
        yield* flow.setInboxLimit("il.late", { maxInFlight: 5 })
        expect((yield* flow.inboxLimits).find((l) => l.consumer === "il.late")!.inFlight).toBe(4)
        expect(yield* claimOf("w2", "il.late")).toHaveLength(1)
        yield* completeAll(before.slice(0, 2))
        expect(yield* claimOf("w2", "il.late")).toHaveLength(2)
      }))

    it.effect("a limit set on a consumer that had only a rate counts what the rate's claims took", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const sql = yield* SqlClient.SqlClient
        yield* flow.setInboxLimit("il.rated", { rate: { limit: 100, per: "1 second" } })
        yield* receiveAll("il.rated", 10)
        const taken = yield* claimOf("w1", "il.rated", 6)
        expect(taken).toHaveLength(6)
        // A rate alone records nothing per claim.
        expect(yield* sql`SELECT 1 FROM durable.inbox_flow_claims WHERE consumer = 'il.rated'`).toEqual([])
        yield* flow.setInboxLimit("il.rated", { maxInFlight: 7, rate: { limit: 100, per: "1 second" } })
        expect((yield* flow.inboxLimits).find((l) => l.consumer === "il.rated")!.inFlight).toBe(6)
        expect(yield* claimOf("w2", "il.rated")).toHaveLength(1)
      }))

    it.effect("a limit that never binds: one row per claim, counted exactly only when the rows pile up or the room runs short", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const sql = yield* SqlClient.SqlClient
        yield* flow.setInboxLimit("il.roomy", { maxInFlight: 100_000 })
        yield* receiveAll("il.roomy", 600)
        const rows = sql<{ n: number; taken: number; slots: number; most: number }>`
          SELECT coalesce(sum(n), 0)::int AS n, coalesce(sum(taken), 0)::int AS taken, count(*)::int AS slots,
                 coalesce(max(n), 0)::int AS most
            FROM (SELECT slot, count(*) AS n, sum(taken) AS taken FROM durable.inbox_flow_claims
                   WHERE consumer = 'il.roomy' GROUP BY slot) s`
        let most = 0
        let slots = 0
        let claims = 0
        for (let i = 0; i < 300; i++) {
          yield* completeAll(yield* claimOf("w1", "il.roomy", 2))
          const now = (yield* rows)[0]!
          most = Math.max(most, now.most)
          slots = Math.max(slots, now.slots)
          claims = Math.max(claims, now.n)
        }
        // Every claim wrote one row, under the slot it took (a limit of 100,000 has 8); a claim
        // finding more than 32 rows in its slot counted the oldest and dropped the settled.
        expect(slots).toBe(8)
        expect(most).toBe(33)
        expect(claims).toBeLessThanOrEqual(8 * 33)
        // Nothing is in flight: the rows left overstate it, the listing counts exactly.
        expect((yield* rows)[0]!.taken).toBeGreaterThan(0)
        expect((yield* flow.inboxLimits).find((l) => l.consumer === "il.roomy")!.inFlight).toBe(0)
        // Short of room, a claim counts exactly first: a limit of 2 with every earlier entry settled.
        yield* receiveAll("il.roomy2", 4)
        yield* flow.setInboxLimit("il.roomy2", { maxInFlight: 2 })
        yield* completeAll(yield* claimOf("w1", "il.roomy2", 2))
        expect(yield* claimOf("w1", "il.roomy2", 2)).toHaveLength(2)
        expect(yield* claimOf("w1", "il.roomy2", 2)).toHaveLength(0)
      }))

    it.effect("the exact count probes each entry recorded by id, never the consumer's backlog", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const sql = yield* SqlClient.SqlClient
        yield* receiveAll("il.probe", 3_000)
        yield* flow.setInboxLimit("il.probe", { maxInFlight: 1_000 })
        const taken = yield* claimOf("w1", "il.probe", 200)
        yield* completeAll(taken.slice(0, 100))
        // The count of one claim row, as the deployed claim writes it, run under EXPLAIN ANALYZE.
        const deployed = yield* sql<{ source: string }>`
          SELECT prosrc AS source FROM pg_proc
           WHERE proname = 'inbox_claim_limited' AND pronamespace = 'durable'::regnamespace`
        const count = /still := \((SELECT count\(\*\) FROM unnest\(claim_row[\s\S]*?)\);\n/.exec(
          deployed[0]!.source
        )![1]!
          .replaceAll("claim_row.", "r.")
          .replace(
            "FROM unnest",
            "FROM (SELECT * FROM durable.inbox_flow_claims WHERE consumer = 'il.probe' ORDER BY id LIMIT 1) r, unnest"
          )
        const plan = yield* analyzed(count)
        const scans = nodesOfPlan(plan).filter((node) => node["Relation Name"] === "inbox")
        expect(scans.length).toBeGreaterThan(0)
        // One probe per entry recorded (200), no scan of the inbox run once over more rows.
        expect(scans.reduce((sum, node) => sum + (node["Actual Loops"] ?? 0), 0)).toBeLessThanOrEqual(200)
        expect(rowsRead(plan, (node) => scans.includes(node) && node["Actual Loops"] === 1)).toBeLessThanOrEqual(200)
        // The same for the count of one claim row by a claim that takes slots (migration 27: a
        // consumer without a rate; the claim of 200 is one row, in one of the limit's four slots).
        const slotPlan = yield* analyzed(
          yield* slotRecount(
            "inbox_claim_slots",
            "SELECT * FROM durable.inbox_flow_claims WHERE consumer = 'il.probe' ORDER BY id"
          )
        )
        const slotScans = nodesOfPlan(slotPlan).filter((node) => node["Relation Name"] === "inbox")
        expect(slotScans.length).toBeGreaterThan(0)
        expect(slotScans.reduce((sum, node) => sum + (node["Actual Loops"] ?? 0), 0)).toBeLessThanOrEqual(200)
        expect(rowsRead(slotPlan, (node) => slotScans.includes(node) && node["Actual Loops"] === 1))
          .toBeLessThanOrEqual(200)
        yield* completeAll(taken.slice(100))
      }))

    it.effect("a lease that ran out on a limited consumer is not renewed (one or many); on a consumer without limits it is", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const worker = yield* InboxWorker.InboxWorker
        const sql = yield* SqlClient.SqlClient
        yield* flow.setInboxLimit("il.renew", { maxInFlight: 10 })
        yield* receiveAll("il.renew", 3)
        yield* receiveAll("il.open", 3)
        const limited = yield* claimOf("w1", "il.renew")
        const open = yield* claimOf("w1", "il.open")
        // The holders stalled past their leases; nobody claimed the entries meanwhile.
        yield* sql`UPDATE durable.inbox SET claimed_until = now() - interval '1 second'
                    WHERE consumer IN ('il.renew', 'il.open')`
        expect((yield* Effect.flip(worker.renewLease(limited[0]!.claim, "1 minute")))._tag).toBe("ClaimMismatch")
        const many = yield* worker.renewLeases(limited.slice(1).map((e) => e.claim), "1 minute")
        expect(many.applied).toEqual([])
        expect(many.rejected).toHaveLength(2)
        // Without limits, a late holder keeps what nobody took.
        yield* worker.renewLease(open[0]!.claim, "1 minute")
        expect((yield* worker.renewLeases(open.slice(1).map((e) => e.claim), "1 minute")).applied).toHaveLength(2)
        // A lease still running is renewed on a limited consumer too.
        const fresh = yield* claimOf("w2", "il.renew")
        expect(fresh).toHaveLength(3)
        expect((yield* worker.renewLeases(fresh.map((e) => e.claim), "1 minute")).applied).toHaveLength(3)
      }))

    it.effect("bad limits are typed refusals naming the rule; nothing is written", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const cases: ReadonlyArray<readonly [string, unknown, string]> = [
          ["il.bad", { maxInFlight: 0 }, "maxInFlight"],
          ["il.bad", { maxInFlight: -1 }, "maxInFlight"],
          ["il.bad", { maxInFlight: 1.5 }, "maxInFlight"],
          ["il.bad", { maxInFlight: Number.NaN }, "maxInFlight"],
          ["il.bad", { maxInFlight: Number.POSITIVE_INFINITY }, "maxInFlight"],
          ["il.bad", { maxInFlight: 1_000_001 }, "maxInFlight"],
          ["il.bad", { rate: { limit: 1, per: "-1 seconds" } }, "rate.per"],
          ["il.bad", { rate: { limit: 1, per: "1 second", brust: 2 } }, "rate.brust"],
          ["il.bad", { maxInFlight: 2, groupMaxInFlight: 1 }, "options.groupMaxInFlight"],
          ["il.bad", {}, "options"],
          ["il.bad", { maxInFlight: null, rate: null }, "options"],
          ["il.bad", { maxInFlight: 2, by: "" }, "by"],
          ["il\u0000bad", { maxInFlight: 2 }, "consumer"],
          ["x".repeat(129), { maxInFlight: 2 }, "consumer"],
          ["", { maxInFlight: 2 }, "consumer"]
        ]
        for (const [consumer, options, argument] of cases) {
          expect(yield* Effect.flip(flow.setInboxLimit(consumer, options as never))).toMatchObject({
            _tag: "InvalidInput",
            argument
          })
        }
        expect((yield* Effect.flip(flow.clearInbox("il\u0000bad")))._tag).toBe("InvalidInput")
        expect((yield* flow.inboxLimits).filter((l) => l.consumer.startsWith("il.bad"))).toEqual([])
      }))
  })
})
