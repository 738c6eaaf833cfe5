// Capacity slots (migration 27): claims of one topic (or inbox consumer) with only an in-flight
// limit take slots of the limit instead of its limits row, so they run at once. Proven here:
// a claim does not wait while another holds capacity uncommitted; concurrent claims and loops
// never pass the limit (the overshoot checker counts inside every claim) and lose no capacity;
// rows past a slot's share (a lowered limit, a claim of the other way, a re-recorded limit) are
// counted before any slot gives more.
import * as FlowChecker from "@effect-durable/testing/FlowChecker"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"
import * as FlowControl from "../src/FlowControl.js"
import * as InboxWorker from "../src/InboxWorker.js"
import * as Outbox from "../src/Outbox.js"
import type * as OutboxWorker from "../src/OutboxWorker.js"
import { claimLoops, claimOf, enqueueAll, markAll, substrate, together } from "./support.js"

/** A topic with an in-flight limit of `maxInFlight` alone and `messages` enqueued; their ids. */
const limitedTopic = (topic: string, maxInFlight: number, messages: number) =>
  Effect.andThen(
    Effect.flatMap(FlowControl.FlowControl, (flow) => flow.setLimit(topic, { maxInFlight })),
    enqueueAll(topic, messages)
  )

/** Claims `limit` at a time from `topic` until a claim returns nothing; every message taken. */
const drainClaims = (topic: string, limit: number) =>
  Effect.gen(function*() {
    const taken: Array<OutboxWorker.OutboxMessage> = []
    while (true) {
      const claimed = yield* claimOf("sweep", [topic], limit)
      if (claimed.length === 0) return taken
      taken.push(...claimed)
    }
  })

/** The slots the claim rows of `key` name, and what each row set took, at most. */
const slotsOf = (table: "flow_claims" | "inbox_flow_claims", key: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ slot: number; taken: number }>`
      SELECT slot, sum(taken)::int AS taken FROM ${sql.literal(`durable.${table}`)}
       WHERE ${sql.literal(table === "flow_claims" ? "topic" : "consumer")} = ${key} GROUP BY slot ORDER BY slot`)

/**
 * Runs `claim` in a transaction kept open until `release` runs (which waits for the commit): the
 * capacity it took stays taken and uncommitted meanwhile. Its result, the release, its fiber.
 */
const holdOpen = <A, E, R>(claim: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const held = yield* Deferred.make<A>()
    const done = yield* Deferred.make<void>()
    const fiber = yield* Effect.gen(function*() {
      yield* Deferred.succeed(held, yield* claim)
      yield* Deferred.await(done)
    }).pipe(sql.withTransaction, Effect.forkChild)
    const result = yield* Deferred.await(held)
    return { result, fiber, release: Effect.andThen(Deferred.succeed(done, undefined), Fiber.join(fiber)) }
  })

/** A claim of `limit` from `topic` by the claim function itself (inside the caller's transaction): how many. */
const rawClaim = (topic: string, limit: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<
        { n: number }
      >`SELECT count(*)::int AS n FROM durable.outbox_claim('holder', ${limit}, 60, ARRAY[${topic}], 25, 1)`,
      (rows) => rows[0]!.n
    ))

/**
 * What `run` does while `hold`'s claim is taken and uncommitted: `hold`'s result and `run`'s.
 * Bounded: a claim that waited for the holder (as every claim of a limited topic did before
 * version 27) would never return while the holder waits for it.
 */
const whileHeld = <A, B, E1, E2, R1, R2>(hold: Effect.Effect<A, E1, R1>, run: Effect.Effect<B, E2, R2>) =>
  Effect.gen(function*() {
    const holder = yield* holdOpen(hold)
    const second = yield* Effect.timeoutOrElse(run, {
      duration: "30 seconds",
      orElse: () => Effect.die(new Error("the second claim waited for the first"))
    })
    yield* holder.release
    return [holder.result, second] as const
  })

/**
 * Waits until `n` sessions of this database wait for an advisory lock (a barrier the database
 * decides), on the live clock; 30 seconds at most.
 */
const advisoryWaiters = (n: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ waiting: number }>`
      SELECT count(*)::int AS waiting FROM pg_locks
       WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
      .pipe(
        Effect.repeat({ until: (rows) => rows[0]!.waiting >= n, schedule: Schedule.spaced("10 millis") }),
        Effect.timeoutOrElse({
          duration: "30 seconds",
          orElse: () => Effect.die(new Error(`fewer than ${n} waiters on advisory locks`))
        })
      ))

describe("capacity slots: the outbox", () => {
  it.layer(substrate({}, { maxConnections: 24 }), { timeout: "3 minutes", excludeTestServices: true })((it) => {
    // First in its database: the overshoot checker, once installed, makes checked claims pass
    // its lock one at a time.
    it.effect("a claim does not wait for another claim of the topic that holds capacity uncommitted; together they stay within the limit", () =>
      Effect.gen(function*() {
        const topic = "cs.at-once"
        yield* limitedTopic(topic, 1000, 2000)
        const [first, second] = yield* whileHeld(
          rawClaim(topic, 600),
          Effect.map(claimOf("second", [topic], 600), (claimed) => claimed.length)
        )
        // The first holds five of the limit's eight slots of 125 (the fifth with 25 unused until
        // it commits); the second takes the other three.
        expect(first).toBe(600)
        expect(second).toBe(375)
        expect(yield* claimOf("third", [topic], 600)).toHaveLength(25)
        expect(yield* claimOf("fourth", [topic], 100)).toHaveLength(0)
        const slots = yield* slotsOf("flow_claims", topic)
        expect(slots).toEqual([0, 1, 2, 3, 4, 5, 6, 7].map((slot) => ({ slot, taken: 125 })))
      }))

    it.effect("a claim whose backend is killed while it holds slots loses nothing: what it took is rolled back and its slots are free", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const topic = "cs.killed"
        yield* limitedTopic(topic, 1000, 2000)
        const holder = yield* holdOpen(Effect.gen(function*() {
          const [backend] = yield* sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`
          expect(yield* rawClaim(topic, 600)).toBe(600)
          return backend!.pid
        }))
        // (Waits until the backend is gone: until then its locks are held.)
        yield* sql`SELECT pg_terminate_backend(${holder.result}, 30000)`
        // The holder's fiber still waits; its transaction died with its backend.
        yield* Fiber.interrupt(holder.fiber)
        // Nothing of its claim counts; every slot is free: the whole limit, at once.
        expect(yield* claimOf("after", [topic], 1000)).toHaveLength(1000)
        expect(yield* claimOf("after", [topic], 1000)).toHaveLength(0)
      }))

    it.effect("16 claims at once never pass the limit and lose none of it; then 16 loops of claim and mark: every message once, never past the limit (checked inside every claim)", () =>
      Effect.gen(function*() {
        yield* FlowChecker.install()
        const topic = "cs.race"
        const ids = yield* limitedTopic(topic, 1000, 4000)
        const atOnce = (yield* together(16, (i) => claimOf(`w${i}`, [topic], 120))).flat()
        expect(atOnce.length).toBeGreaterThan(0)
        expect(atOnce.length).toBeLessThanOrEqual(1000)
        // What the 16 left of the limit is still there: one claim takes exactly the rest.
        const rest = yield* drainClaims(topic, 1000)
        expect(atOnce.length + rest.length).toBe(1000)
        yield* markAll([...atOnce, ...rest])
        const loops = yield* claimLoops(16, ids.length - 1000, (i) => claimOf(`v${i}`, [topic], 120), markAll)
        expect([...atOnce, ...rest].map((m) => m.id).concat(loops).sort()).toEqual([...ids].sort())
        expect((yield* FlowChecker.overshoots()).filter((o) => o.topic === topic)).toEqual([])
      }))

    it.effect("a lowered limit: rows past the slots' shares are counted before any slot gives more, exactly what the limit leaves once they are within them, and all of it once they settle", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const sql = yield* SqlClient.SqlClient
        const topic = "cs.lowered"
        yield* limitedTopic(topic, 1000, 3000)
        const all = yield* claimOf("w", [topic], 1000)
        expect(all).toHaveLength(1000)
        // 500 now: the eight slots' shares are 62 or 63, and each holds 125.
        yield* flow.setLimit(topic, { maxInFlight: 500 })
        expect(yield* claimOf("w", [topic], 1000)).toHaveLength(0)
        const rows = yield* sql<{ id: string; slot: number }>`
          SELECT unnest(entries)::text AS id, slot FROM durable.flow_claims WHERE topic = ${topic}`
        const slotOf = new Map(rows.map((r) => [r.id, r.slot]))
        const bySlot = [0, 1, 2, 3, 4, 5, 6, 7].map((slot) => all.filter((m) => slotOf.get(m.id) === slot))
        expect(bySlot.map((messages) => messages.length)).toEqual([125, 125, 125, 125, 125, 125, 125, 125])
        // All but 50 of each slot settle: 400 in flight, every slot within its share, 100 free.
        yield* markAll(bySlot.flatMap((messages) => messages.slice(50)))
        const hundred = yield* claimOf("w", [topic], 1000)
        expect(hundred).toHaveLength(100)
        expect(yield* claimOf("w", [topic], 1000)).toHaveLength(0)
        // Everything settles: exactly the new limit again.
        yield* markAll([...bySlot.flatMap((messages) => messages.slice(0, 50)), ...hundred])
        expect(yield* drainClaims(topic, 1000)).toHaveLength(500)
      }))

    it.effect("a limit lowered to fewer slots records what is in flight afresh over them: exactly what the new limit leaves once it fits", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const topic = "cs.fewer-slots"
        yield* limitedTopic(topic, 1000, 2000)
        const all = yield* claimOf("w", [topic], 1000)
        expect(all).toHaveLength(1000)
        // 100: six slots of 16 or 17 (eight before); the 1,000 in flight are recorded over the six.
        yield* flow.setLimit(topic, { maxInFlight: 100 })
        expect((yield* slotsOf("flow_claims", topic)).map((s) => s.slot)).toEqual([0, 1, 2, 3, 4, 5])
        expect(yield* claimOf("w", [topic], 1000)).toHaveLength(0)
        // All but the last 60 settle: 10 in each slot, 40 of the limit free.
        yield* markAll(all.slice(0, 940))
        const forty = yield* claimOf("w", [topic], 1000)
        expect(forty).toHaveLength(40)
        expect(yield* claimOf("w", [topic], 1000)).toHaveLength(0)
        yield* markAll([...all.slice(940), ...forty])
        expect(yield* drainClaims(topic, 1000)).toHaveLength(100)
      }))

    it.effect("clearing a limit waits for the claims under way: no row of theirs is left behind to count twice", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const topic = "cs.cleared"
        yield* limitedTopic(topic, 1000, 2000)
        const holder = yield* holdOpen(rawClaim(topic, 600))
        const cleared = yield* Effect.forkChild(flow.clear(topic))
        // The clear waits for the claim (a barrier the database decides).
        yield* advisoryWaiters(1)
        yield* holder.release
        expect(yield* Fiber.join(cleared)).toBe(true)
        expect(yield* slotsOf("flow_claims", topic)).toEqual([])
        // A new limit counts the 600 once.
        yield* flow.setLimit(topic, { maxInFlight: 1000 })
        expect((yield* flow.limits).find((l) => l.topic === topic)!.inFlight).toBe(600)
        expect(yield* drainClaims(topic, 1000)).toHaveLength(400)
      }))

    it.effect("a claim of the other way (a named group appeared) waits for the claims that hold slots, then counts what they took", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = "cs.waits"
        yield* limitedTopic(topic, 1000, 2000)
        const holder = yield* holdOpen(rawClaim(topic, 600))
        expect(holder.result).toBe(600)
        yield* outbox.enqueue(topic, { named: true }, { group: "tenant-a" })
        const other = yield* Effect.forkChild(claimOf("other", [topic], 1000))
        // The claim of the other way waits for a slot the holder took (a barrier the database decides).
        yield* advisoryWaiters(1)
        yield* holder.release
        expect(yield* Fiber.join(other)).toHaveLength(400)
      }))

    it.effect("a claim of the other way that waited for a slot reads the buckets' clock after the wait: a rate is not spent twice", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        // A topic with a rate only (burst 10, 10 a second) and one with an in-flight limit only.
        yield* flow.setLimit("cs.rated", { rate: { limit: 10, per: "1 second", burst: 10 } })
        yield* flow.setLimit("cs.slotted", { maxInFlight: 100 })
        yield* enqueueAll("cs.rated", 50)
        yield* enqueueAll("cs.slotted", 200)
        const holder = yield* holdOpen(rawClaim("cs.slotted", 10))
        // A claim of both topics goes the other way and waits for the slot the holder took.
        const both = yield* Effect.forkChild(claimOf("both", ["cs.rated", "cs.slotted"], 50))
        yield* advisoryWaiters(1)
        // The bucket's clock runs on while it waits (real time: the database's clock is the subject).
        yield* Effect.sleep("1 second")
        const sql = yield* SqlClient.SqlClient
        const databaseClock = Effect.map(
          sql<{ t: number }>`SELECT extract(epoch FROM clock_timestamp())::float8 AS t`,
          ([row]) => row!.t
        )
        // The first claim reads its buckets' clock after this (it holds no slot before), the
        // second before the one after it.
        const released = yield* databaseClock
        yield* holder.release
        const first = (yield* Fiber.join(both)).filter((m) => m.topic === "cs.rated")
        const second = yield* claimOf("after", ["cs.rated"], 50)
        const elapsed = (yield* databaseClock) - released
        // The burst, then what the time between the two claims adds (10 a second; a token more
        // for rounding). Reading the clock before the wait, the first claim spent the full bucket
        // as of then and the second found the second of waiting refilled: 10 more, whatever the
        // time between them (so the check means something while that is well under a second).
        expect(first).toHaveLength(10)
        expect(second.length).toBeLessThanOrEqual(Math.floor(10 * elapsed) + 1)
      }))

    it.effect("a claim of the other way (a named group appeared) counts every slot; the slots then count what it took", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = "cs.both-ways"
        yield* limitedTopic(topic, 1000, 2000)
        const bySlots = yield* claimOf("w", [topic], 600)
        expect(bySlots).toHaveLength(600)
        // A message with a named group: claims take the way of groups and fair share.
        yield* outbox.enqueue(topic, { named: true }, { group: "tenant-a" })
        const byGroups = yield* claimOf("w", [topic], 1000)
        expect(byGroups).toHaveLength(400)
        expect(byGroups.some((m) => (m.payload as { named?: boolean }).named === true)).toBe(true)
        // The named message settles: the slots again, which see everything in flight (999 of 1,000).
        const named = byGroups.filter((m) => (m.payload as { named?: boolean }).named === true)
        yield* markAll(named)
        // The claim of the other way recorded its 400 under the slots' rooms (25 + 3 x 125), not
        // past a share: the one message that settled is exactly what the slots give.
        const last = yield* claimOf("w", [topic], 1000)
        expect(last).toHaveLength(1)
        expect(yield* claimOf("w", [topic], 1000)).toHaveLength(0)
        // Everything settles: exactly the limit again.
        yield* markAll([...bySlots, ...byGroups.filter((m) => !named.includes(m)), ...last])
        expect(yield* drainClaims(topic, 1000)).toHaveLength(1000)
      }))
  })
})

describe("capacity slots: the stored inbox", () => {
  it.layer(substrate({}, { maxConnections: 24 }), { timeout: "3 minutes", excludeTestServices: true })((it) => {
    /** Stores `n` entries for `consumer` in one statement; their ids. */
    const store = (consumer: string, n: number) =>
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        Effect.map(
          sql<{ id: string }>`
            INSERT INTO durable.inbox (consumer, message_id, payload, headers, max_attempts)
            SELECT ${consumer}, 'm' || g, '{}'::jsonb, '{}'::jsonb, 25 FROM generate_series(1, ${n}) g
            RETURNING id::text AS id`,
          (rows) => rows.map((r) => r.id)
        ))
    const claimOf = (worker: string, consumer: string, limit: number) =>
      Effect.flatMap(InboxWorker.InboxWorker, (w) => w.claim({ consumer, worker, limit, lease: "1 minute" }))
    const completeAll = (entries: ReadonlyArray<InboxWorker.InboxEntry>) =>
      Effect.flatMap(
        InboxWorker.InboxWorker,
        (w) => entries.length === 0 ? Effect.void : Effect.asVoid(w.completeMany(entries.map((e) => e.claim)))
      )

    it.effect("a claim does not wait for another claim of the consumer that holds capacity uncommitted; together they stay within the limit", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const sql = yield* SqlClient.SqlClient
        yield* flow.setInboxLimit("cs.inbox", { maxInFlight: 1000 })
        yield* store("cs.inbox", 2000)
        const [first, second] = yield* whileHeld(
          Effect.map(
            sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.inbox_claim('holder', 600, 60, 'cs.inbox', 25)`,
            (rows) => rows[0]!.n
          ),
          Effect.map(claimOf("second", "cs.inbox", 600), (claimed) => claimed.length)
        )
        expect(first).toBe(600)
        expect(second).toBe(375)
        expect(yield* claimOf("third", "cs.inbox", 600)).toHaveLength(25)
        expect(yield* claimOf("fourth", "cs.inbox", 100)).toHaveLength(0)
      }))

    it.effect("16 loops of claim and complete: every entry once, never past the limit (checked inside every claim)", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* FlowChecker.install()
        yield* flow.setInboxLimit("cs.inbox-race", { maxInFlight: 1000 })
        const ids = yield* store("cs.inbox-race", 4000)
        const processed = yield* claimLoops(16, ids.length, (i) => claimOf(`v${i}`, "cs.inbox-race", 120), completeAll)
        expect([...processed].sort()).toEqual([...ids].sort())
        expect((yield* FlowChecker.overshoots()).filter((o) => o.topic === "cs.inbox-race")).toEqual([])
      }))

    it.effect("a limit set again while entries are in flight records them afresh, round robin over the slots; past the shares, they are counted before any slot gives more", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* flow.setInboxLimit("cs.inbox-lowered", { maxInFlight: 1000 })
        yield* store("cs.inbox-lowered", 3000)
        const all = yield* claimOf("w", "cs.inbox-lowered", 1000)
        expect(all).toHaveLength(1000)
        // 500: the 1,000 in flight are recorded afresh, round robin over the eight slots (125
        // each, past their shares of 62 or 63).
        yield* flow.setInboxLimit("cs.inbox-lowered", { maxInFlight: 500 })
        expect(yield* slotsOf("inbox_flow_claims", "cs.inbox-lowered")).toEqual(
          [0, 1, 2, 3, 4, 5, 6, 7].map((slot) => ({ slot, taken: 125 }))
        )
        expect(yield* claimOf("w", "cs.inbox-lowered", 1000)).toHaveLength(0)
        // The first 600 settle: 400 in flight, 50 in each slot, 100 of the limit free.
        yield* completeAll(all.slice(0, 600))
        const hundred = yield* claimOf("w", "cs.inbox-lowered", 1000)
        expect(hundred).toHaveLength(100)
        expect(yield* claimOf("w", "cs.inbox-lowered", 1000)).toHaveLength(0)
        // Everything settles: exactly the new limit again.
        yield* completeAll([...all.slice(600), ...hundred])
        expect(yield* claimOf("w", "cs.inbox-lowered", 1000)).toHaveLength(500)
      }))
  })
})
