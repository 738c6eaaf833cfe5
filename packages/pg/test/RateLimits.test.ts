// Rate limits held by the claim (migration 18): token buckets per topic and per group on the
// database's clock. Time here is the database's, so the tests move a bucket's clock back
// (what a wait would do) instead of waiting; the concurrent test runs on real time and lets
// the checker (inside the database) hold every span of claims against the bucket.
import * as FlowChecker from "@effect-durable/testing/FlowChecker"
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import * as FlowControl from "../src/FlowControl.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { claimLoops, claimOf, enqueueAll, markAll, substrate } from "./support.js"

/** What `seconds` of waiting would do to a topic's buckets: their clocks moved back. */
const elapse = (topic: string, seconds: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.andThen(
      sql`UPDATE durable.flow_limits SET tokens_at = tokens_at - make_interval(secs => ${seconds}) WHERE topic = ${topic}`,
      sql`UPDATE durable.flow_group_buckets SET tokens_at = tokens_at - make_interval(secs => ${seconds}) WHERE topic = ${topic}`
    ))

const groupCounts = (claimed: ReadonlyArray<OutboxWorker.OutboxMessage>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ group_key: string; n: number }>`SELECT group_key, count(*)::int AS n FROM durable.outbox
                                            WHERE id = ANY(${claimed.map((m) => m.id)}::bigint[]) GROUP BY 1`,
      (rows) => Object.fromEntries(rows.map((r) => [r.group_key, r.n]))
    ))

describe("FlowControl: rate limits held by the claim", () => {
  it.layer(substrate({}, { maxConnections: 24 }), { timeout: "3 minutes", excludeTestServices: true })((it) => {
    it.effect("a topic's rate: a burst at once, then a token per period; a claim takes no more than the bucket holds", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* flow.setLimit("rl.topic", { rate: { limit: 10, per: "1 hour", burst: 3 } })
        yield* enqueueAll("rl.topic", 20)
        const first = yield* claimOf("w1", ["rl.topic"])
        expect(first).toHaveLength(3)
        // Settled or not, nothing more until the bucket refills: a rate is not a slot.
        yield* markAll(first)
        expect(yield* claimOf("w1", ["rl.topic"])).toHaveLength(0)
        const listed = (yield* flow.limits).find((l) => l.topic === "rl.topic")!
        expect(listed).toMatchObject({ rate: { limit: 10, perMillis: 3_600_000, burst: 3 }, maxInFlight: null })
        expect(listed.tokens).toBeGreaterThanOrEqual(0)
        expect(listed.tokens).toBeLessThan(1)
        // Six minutes is one token at 10 an hour; thirteen, two; an hour, the burst (never more).
        yield* elapse("rl.topic", 6 * 60)
        expect(yield* claimOf("w1", ["rl.topic"])).toHaveLength(1)
        yield* elapse("rl.topic", 13 * 60)
        expect(yield* claimOf("w1", ["rl.topic"])).toHaveLength(2)
        yield* elapse("rl.topic", 3600)
        expect(yield* claimOf("w1", ["rl.topic"])).toHaveLength(3)
        // Cleared: no rate at all.
        expect(yield* flow.clear("rl.topic")).toBe(true)
        expect(yield* claimOf("w1", ["rl.topic"])).toHaveLength(11)
      }))

    it.effect("group rates: every group's own bucket, a group's own rate (a tier), messages without a group under the topic's rate only", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* flow.setLimit("rl.groups", { groupRate: { limit: 1, per: "1 hour", burst: 2 } })
        yield* flow.setGroup("rl.groups", "vip", { rate: { limit: 100, per: "1 hour", burst: 5 } })
        yield* enqueueAll("rl.groups", 10, { group: "a" })
        yield* enqueueAll("rl.groups", 10, { group: "b" })
        yield* enqueueAll("rl.groups", 10, { group: "vip" })
        yield* enqueueAll("rl.groups", 4)
        const first = yield* claimOf("w1", ["rl.groups"])
        expect(yield* groupCounts(first)).toEqual({ a: 2, b: 2, vip: 5, "": 4 })
        expect(yield* claimOf("w1", ["rl.groups"])).toHaveLength(0)
        // 36 s is a vip token (100 an hour), not yet one of the others' (1 an hour).
        yield* elapse("rl.groups", 36)
        expect(yield* groupCounts(yield* claimOf("w1", ["rl.groups"]))).toEqual({ vip: 1 })
        // Buckets that have filled again are no rows (a full bucket is the default).
        yield* elapse("rl.groups", 2 * 3600)
        const sql = yield* SqlClient.SqlClient
        expect(yield* groupCounts(yield* claimOf("w1", ["rl.groups"]))).toEqual({ a: 2, b: 2, vip: 4 })
        const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.flow_group_buckets
                                               WHERE topic = 'rl.groups'`
        expect(rows[0]!.n).toBe(3)
        yield* elapse("rl.groups", 2 * 3600)
        expect(yield* claimOf("w1", ["rl.groups"])).toHaveLength(4) // a and b: 2 each; vip: none left
        const after = yield* sql<{ group_key: string }>`SELECT group_key FROM durable.flow_group_buckets
                                                        WHERE topic = 'rl.groups' ORDER BY 1`
        expect(after.map((r) => r.group_key)).toEqual(["a", "b"])
      }))

    it.effect("a rate and an in-flight limit together: the claim takes the least of the two", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* flow.setLimit("rl.both", { maxInFlight: 2, rate: { limit: 1, per: "1 hour", burst: 5 } })
        yield* enqueueAll("rl.both", 10)
        const first = yield* claimOf("w1", ["rl.both"])
        expect(first).toHaveLength(2)
        yield* markAll(first)
        const second = yield* claimOf("w1", ["rl.both"])
        expect(second).toHaveLength(2)
        yield* markAll(second)
        // Free slots, one token left.
        expect(yield* claimOf("w1", ["rl.both"])).toHaveLength(1)
      }))

    it.effect("a changed rate keeps the tokens its bucket holds (at most the new burst); a new rate starts full", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* flow.setLimit("rl.change", { rate: { limit: 1, per: "1 hour", burst: 10 } })
        yield* enqueueAll("rl.change", 30)
        expect(yield* claimOf("w1", ["rl.change"], 4)).toHaveLength(4)
        // 6 tokens left; a burst of 3 holds 3 of them.
        yield* flow.setLimit("rl.change", { rate: { limit: 1, per: "1 hour", burst: 3 } })
        expect(yield* claimOf("w1", ["rl.change"])).toHaveLength(3)
        // Raised burst: no tokens appear from it.
        yield* flow.setLimit("rl.change", { rate: { limit: 1, per: "1 hour", burst: 20 } })
        expect(yield* claimOf("w1", ["rl.change"])).toHaveLength(0)
        // The rate removed and set again: a new bucket, full.
        yield* flow.setLimit("rl.change", { maxInFlight: 1000 })
        yield* flow.setLimit("rl.change", { rate: { limit: 1, per: "1 hour", burst: 2 } })
        expect(yield* claimOf("w1", ["rl.change"])).toHaveLength(2)
      }))

    it.effect("an empty bucket does not hold up the other topics of the same claim", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* flow.setLimit("rl.empty", { rate: { limit: 1, per: "1 hour", burst: 1 } })
        yield* enqueueAll("rl.empty", 5)
        yield* enqueueAll("rl.free", 5)
        const claimed = yield* claimOf("w1", ["rl.empty", "rl.free"])
        expect(claimed.filter((m) => m.topic === "rl.empty")).toHaveLength(1)
        expect(claimed.filter((m) => m.topic === "rl.free")).toHaveLength(5)
        const again = yield* claimOf("w1", ["rl.empty", "rl.free"])
        expect(again).toHaveLength(0)
      }))

    it.effect("rateWait: after an empty claim, how long until a bucket lets a claim take a ready message (the topic's, a group's), zero when a token is there, none when no rate holds one back", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const worker = yield* OutboxWorker.OutboxWorker
        const seconds = (topics: ReadonlyArray<string>) =>
          Effect.map(worker.rateWait(topics), Option.map((d) => Duration.toMillis(d) / 1000))
        yield* enqueueAll("rw.none", 3)
        expect(yield* seconds(["rw.none"])).toEqual(Option.none())
        // The topic's bucket: one token an hour, spent.
        yield* flow.setLimit("rw.topic", { rate: { limit: 1, per: "1 hour", burst: 1 } })
        yield* enqueueAll("rw.topic", 3)
        // A token is there (it came after an empty claim): zero, claim at once.
        expect(yield* seconds(["rw.topic"])).toEqual(Option.some(0))
        expect(yield* claimOf("w1", ["rw.topic"])).toHaveLength(1)
        const topicWait = Option.getOrThrow(yield* seconds(["rw.topic"]))
        expect(topicWait).toBeGreaterThan(3500)
        expect(topicWait).toBeLessThanOrEqual(3600)
        // A group's bucket: the topic has tokens, the one group with messages has none for 30 s.
        yield* flow.setLimit("rw.group", { groupRate: { limit: 2, per: "1 minute", burst: 1 } })
        yield* enqueueAll("rw.group", 3, { group: "a" })
        expect(yield* claimOf("w1", ["rw.group"])).toHaveLength(1)
        const groupWait = Option.getOrThrow(yield* seconds(["rw.group"]))
        expect(groupWait).toBeGreaterThan(25)
        expect(groupWait).toBeLessThanOrEqual(30)
        // A group with tokens but nothing ready (its message in flight) does not make it zero:
        // the group with ready messages and an empty bucket decides.
        yield* flow.setLimit("rw.mixed", { groupRate: { limit: 1, per: "1 minute", burst: 2 } })
        yield* enqueueAll("rw.mixed", 1, { group: "a" })
        expect(yield* claimOf("w1", ["rw.mixed"])).toHaveLength(1)
        yield* enqueueAll("rw.mixed", 5, { group: "b" })
        expect(yield* claimOf("w1", ["rw.mixed"])).toHaveLength(2)
        const mixedWait = Option.getOrThrow(yield* seconds(["rw.mixed"]))
        expect(mixedWait).toBeGreaterThan(55)
        expect(mixedWait).toBeLessThanOrEqual(60)
        // A paused topic is not waited for.
        const admin = yield* OutboxAdmin.OutboxAdmin
        yield* admin.pause("rw.mixed")
        expect(yield* seconds(["rw.mixed"])).toEqual(Option.none())
        yield* admin.resume("rw.mixed")
        // Topics asked at once: the soonest.
        expect(Option.getOrThrow(yield* seconds(["rw.topic", "rw.group", "rw.mixed"]))).toBeCloseTo(groupWait, 0)
        // Held back by an in-flight limit, not a rate: none (a mark frees it, not time).
        yield* flow.setLimit("rw.slots", { maxInFlight: 1, rate: { limit: 100, per: "1 second" } })
        yield* enqueueAll("rw.slots", 3)
        expect(yield* claimOf("w1", ["rw.slots"])).toHaveLength(1)
        expect(yield* claimOf("w1", ["rw.slots"])).toHaveLength(0)
        expect(yield* seconds(["rw.slots"])).toEqual(Option.none())
        expect(yield* Effect.flip(worker.rateWait([""]))).toMatchObject({ _tag: "InvalidInput", argument: "topics[0]" })
      }))

    it.effect("16 workers claiming in loops on real time: every span of claims within the topic's and each group's bucket (checked inside the database), every message once", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* FlowChecker.install()
        yield* flow.setLimit("rl.race", {
          rate: { limit: 40, per: "1 second", burst: 8 },
          groupRate: { limit: 15, per: "1 second", burst: 3 }
        })
        const ids = [
          ...(yield* enqueueAll("rl.race", 40, { group: "a" })),
          ...(yield* enqueueAll("rl.race", 40, { group: "b" })),
          ...(yield* enqueueAll("rl.race", 40))
        ]
        const delivered = yield* claimLoops(16, ids.length, (i) => claimOf(`w${i}`, ["rl.race"], 5), markAll)
        expect([...delivered].sort()).toEqual([...ids].sort())
        expect(yield* FlowChecker.rateOvershoots()).toEqual([])
        expect(yield* FlowChecker.overshoots()).toEqual([])
      }))

    it.effect("the rate checker itself: claims past the bucket (its clock moved on behind the checker's back) are caught", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* FlowChecker.install()
        yield* flow.setLimit("rl.cheat", { rate: { limit: 1, per: "1 hour", burst: 2 } })
        yield* enqueueAll("rl.cheat", 6)
        expect(yield* claimOf("w1", ["rl.cheat"])).toHaveLength(2)
        yield* elapse("rl.cheat", 7200)
        expect(yield* claimOf("w1", ["rl.cheat"])).toHaveLength(2)
        const caught = yield* FlowChecker.rateOvershoots()
        expect(caught).toEqual([expect.objectContaining({ topic: "rl.cheat", group: "" })])
        expect(caught[0]!.excess).toBeGreaterThan(1.9)
      }))

    it.effect("bad rates are typed refusals naming the rule; nothing is written", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const refusal = (effect: Effect.Effect<unknown, unknown>) => Effect.flip(effect)
        const cases: ReadonlyArray<readonly [unknown, string]> = [
          [{ limit: 0, per: "1 second" }, "rate.limit"],
          [{ limit: Number.NaN, per: "1 second" }, "rate.limit"],
          [{ limit: 1.5, per: "1 second" }, "rate.limit"],
          [{ limit: 1, per: "-1 seconds" }, "rate.per"],
          [{ limit: 1, per: Number.NaN }, "rate.per"],
          [{ limit: 1, per: 0 }, "rate.per"],
          [{ limit: 1, per: "8 days" }, "rate.per"],
          [{ limit: 1, per: "soon" }, "rate.per"],
          [{ limit: 1, per: "1 second", burst: 0 }, "rate.burst"],
          [{ limit: 1, per: "1 second", brust: 3 }, "rate.brust"],
          [{ per: "1 second" }, "rate.limit"],
          ["10/s", "rate"]
        ]
        for (const [rate, argument] of cases) {
          expect(yield* refusal(flow.setLimit("rl.bad", { rate: rate as never }))).toMatchObject({
            _tag: "InvalidInput",
            argument
          })
        }
        expect(yield* refusal(flow.setLimit("rl.bad", { groupRate: { limit: -1, per: "1 second" } }))).toMatchObject({
          argument: "groupRate.limit"
        })
        expect(yield* refusal(flow.setGroup("rl.bad", "g", { rate: { limit: 1, per: "0 millis" } }))).toMatchObject({
          argument: "rate.per"
        })
        expect((yield* flow.limits).some((l) => l.topic === "rl.bad")).toBe(false)
      }))
  })
})
