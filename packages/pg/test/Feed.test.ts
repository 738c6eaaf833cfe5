// The feed in commit order (`Feed`), each test named for the guarantee it holds: a message that
// commits late, behind one already committed, is read and never skipped; every consumer reads
// the same messages in the same order, wherever the messages are (open, delivered, dead); what a
// batch's apply writes commits with the cursor or not at all; two processes of one consumer
// apply each message once; an aborted enqueue is never read; a new cluster's positions start
// above a restored dump's; the oldest writing transaction is named; bad input is a typed refusal.
import { onLiveClock } from "@effect-durable/testing/Eventually"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as SqlClient from "effect/sql/SqlClient"
import * as FastCheck from "fast-check"
import * as Feed from "../src/Feed.js"
import * as Notifications from "../src/Notifications.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { eventually, substrate } from "./support.js"

/** Everything a consumer can read now, batch by batch; the entries in the order read. */
const drain = (name: string, limit = 7) =>
  Effect.gen(function*() {
    const feed = yield* Feed.Feed
    const read: Array<Feed.FeedEntry> = []
    while (true) {
      const n = yield* feed.consume(name, (entries) => Effect.sync(() => read.push(...entries)), { limit })
      if (n === 0) return read
    }
  })

/**
 * What a consumer reads until it has read `count` messages (other test files' transactions in
 * the same cluster may hold the horizon back for a while: the wait is theirs, never a loss).
 */
const readUntil = (name: string, count: number, limit = 7) => {
  const read: Array<Feed.FeedEntry> = []
  return eventually(
    Effect.map(drain(name, limit), (batch) => {
      read.push(...batch)
      return read
    }),
    (all) => all.length >= count
  )
}

/** A transaction that enqueues and stays open until released: its message commits late. */
const lateWriter = (topic: string, payload: unknown) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const outbox = yield* Outbox.Outbox
    const written = yield* Deferred.make<string>()
    const release = yield* Deferred.make<void>()
    const fiber = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
      yield* Deferred.succeed(written, yield* outbox.enqueue(topic, payload))
      yield* Deferred.await(release)
    })))
    const id = yield* Deferred.await(written)
    return { id, commit: Effect.andThen(Deferred.succeed(release, undefined), Fiber.join(fiber)) }
  })

describe("Feed", () => {
  it.layer(substrate())((it) => {
    it.effect("a message that commits late, behind one already committed, is read in its place and never skipped", () =>
      Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        const topic = TestSubstrate.freshName("late")
        yield* feed.register("late-reader", { topics: [topic] })
        const early = yield* outbox.enqueue(topic, { n: 0 })
        const late = yield* lateWriter(topic, { n: 1 })
        const after = yield* outbox.enqueue(topic, { n: 2 }) // committed, its transaction began after the late one's
        // The late transaction holds the horizon: the message committed after it waits, and says so.
        expect((yield* readUntil("late-reader", 1)).map((e) => e.id)).toEqual([early])
        expect(yield* drain("late-reader")).toEqual([])
        yield* eventually(feed.lag("late-reader"), ([lag]) => lag!.held === 1)
        expect((yield* feed.lag("late-reader"))[0]).toMatchObject({ readable: 0, held: 1, read: 1 })
        const holder = yield* eventually(feed.holder, (h) => h !== null)
        expect(holder!.transactionsBehind).toBeGreaterThan(0)
        yield* late.commit
        const read = yield* readUntil("late-reader", 2)
        expect(read.map((e) => e.id)).toEqual([late.id, after])
        expect(read.map((e) => e.payload)).toEqual([{ n: 1 }, { n: 2 }])
        expect(yield* drain("late-reader")).toEqual([])
      }))

    it.effect("every consumer reads the same messages once each, in one order, wherever they are (open, delivered, dead)", () =>
      Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const admin = yield* OutboxAdmin.OutboxAdmin
        const sql = yield* SqlClient.SqlClient
        const topics = [TestSubstrate.freshName("fan-a"), TestSubstrate.freshName("fan-b")]
        for (const name of ["fan-1", "fan-2", "fan-3"]) yield* feed.register(name, { topics })
        const ids = yield* Effect.forEach(
          Array.from({ length: 40 }, (_, i) => i),
          (i) =>
            sql.withTransaction(
              Effect.forEach([0, 1], (j) => outbox.enqueue(topics[(i + j) % 2]!, { i, j }))
            ),
          { concurrency: 8 }
        )
        const all = ids.flat()
        // One reader part-way through while the messages move: some delivered (into the
        // history), some cancelled (into the dead letters), the rest left open.
        const part: Array<Feed.FeedEntry> = []
        yield* eventually(
          feed.consume("fan-1", (entries) => Effect.sync(() => part.push(...entries)), { limit: 5 }),
          (n) => n > 0
        )
        const claimed = yield* worker.claim({ worker: "w", topics, limit: 30, lease: "1 minute" })
        yield* Effect.forEach(claimed.slice(0, 20), (m) => worker.markProjected(m.claim))
        yield* admin.cancel(claimed.slice(20).map((m) => m.id))
        const first = [...part, ...(yield* readUntil("fan-1", all.length - part.length, 3))]
        const second = yield* readUntil("fan-2", all.length, 11)
        const third = yield* readUntil("fan-3", all.length, 100)
        const orderOf = (read: ReadonlyArray<Feed.FeedEntry>) => read.map((e) => `${e.position}/${e.id}`)
        expect(orderOf(first)).toEqual(orderOf(third))
        expect(orderOf(second)).toEqual(orderOf(third))
        expect(new Set(third.map((e) => e.id))).toEqual(new Set(all))
        expect(third.length).toBe(all.length)
        for (const name of ["fan-1", "fan-2", "fan-3"]) expect(yield* drain(name)).toEqual([])
        // Two messages of one transaction share a position and follow each other by id.
        expect(third.every((e, i) => i === 0 || BigInt(third[i - 1]!.position) <= BigInt(e.position))).toBe(true)
      }))

    it.effect("a batch whose apply fails is rolled back with what it wrote; the cursor stays, and the batch is read again", () =>
      Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const topic = TestSubstrate.freshName("apply")
        yield* sql`CREATE TABLE feed_projection (message_id bigint PRIMARY KEY)`
        yield* feed.register("projector", { topics: [topic] })
        const ids = yield* outbox.enqueueMany([1, 2, 3].map((n) => ({ topic, payload: { n } })))
        const project = (fail: boolean) => (entries: ReadonlyArray<Feed.FeedEntry>) =>
          Effect.gen(function*() {
            for (const e of entries) yield* sql`INSERT INTO feed_projection VALUES (${e.id}::bigint)`.pipe(Effect.orDie)
            if (fail) return yield* Effect.fail("the read model refused it" as const)
          })
        yield* eventually(feed.lag("projector"), ([lag]) => lag!.readable === 3)
        expect(yield* Effect.flip(feed.consume("projector", project(true)))).toBe("the read model refused it")
        expect(yield* sql`SELECT * FROM feed_projection`).toEqual([])
        expect((yield* feed.lag("projector"))[0]).toMatchObject({ read: 0, readable: 3, position: "0" })
        expect(yield* feed.consume("projector", project(false))).toBe(3)
        expect(
          (yield* sql<{ id: string }>`SELECT message_id::text AS id FROM feed_projection ORDER BY 1`).map((r) => r.id)
        )
          .toEqual(ids)
        expect((yield* feed.lag("projector"))[0]).toMatchObject({ read: 3, readable: 0, lastId: ids[2] })
      }))

    it.effect("two processes running one consumer apply each message exactly once", () =>
      onLiveClock(Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const topic = TestSubstrate.freshName("twice")
        // No unique key: a message applied twice would show as a second row.
        yield* sql`CREATE TABLE feed_applied (message_id bigint NOT NULL, process int NOT NULL)`
        yield* feed.register("shared", { topics: [topic] })
        const apply = (process: number) => (entries: ReadonlyArray<Feed.FeedEntry>) =>
          Effect.forEach(entries, (e) => sql`INSERT INTO feed_applied VALUES (${e.id}::bigint, ${process})`, {
            discard: true
          }).pipe(Effect.orDie)
        const runners = yield* Effect.forEach(
          [1, 2],
          (p) => Effect.forkChild(feed.run("shared", apply(p), { limit: 3, idle: "5 millis" }))
        )
        const ids = yield* Effect.forEach(
          Array.from({ length: 20 }, (_, i) => i),
          (i) => outbox.enqueueMany([0, 1, 2].map((j) => ({ topic, payload: { i, j } }))),
          { concurrency: 4 }
        )
        yield* eventually(feed.lag("shared"), ([lag]) => lag!.read === 60)
        yield* Effect.forEach(runners, Fiber.interrupt)
        expect((yield* feed.lag("shared"))[0]).toMatchObject({ read: 60, readable: 0 })
        const applied = yield* sql<{ id: string }>`SELECT message_id::text AS id FROM feed_applied ORDER BY message_id`
        expect(applied.map((r) => r.id)).toEqual(ids.flat().sort((a, b) => Number(BigInt(a) - BigInt(b))))
      })))

    it.effect("an idle consumer is woken at commit by an enqueue on its topics, not by its hour-long wait", () =>
      onLiveClock(Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        const topic = TestSubstrate.freshName("woken")
        yield* feed.register("sleeper", { topics: [topic] })
        const read = yield* Deferred.make<ReadonlyArray<string>>()
        // Behind a transaction pooler the LISTEN goes straight to the server, as an application's would.
        const database = yield* TestDatabase.TestDatabase
        const listen = TestDatabase.isPooled(database) ? { listenUrl: database.url } : {}
        const runner = yield* Effect.forkChild(
          feed.run("sleeper", (entries) => Deferred.succeed(read, entries.map((e) => e.id)), {
            idle: "1 hour",
            ...listen
          })
        )
        // Its LISTEN is in place (and its reads so far found nothing): it waits an hour now.
        const sql = yield* SqlClient.SqlClient
        yield* eventually(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                              WHERE application_name = ${Notifications.APPLICATION_NAME} AND query LIKE 'LISTEN%'
                                AND datname = current_database()`,
          ([row]) => row!.n > 0
        )
        const id = yield* outbox.enqueue(topic, { wake: true })
        expect(yield* Deferred.await(read).pipe(Effect.timeout("30 seconds"))).toEqual([id])
        yield* Fiber.interrupt(runner)
      })))

    it.effect("a waiting message replaced by a dedup key takes a new place: consumers read its new content", () =>
      Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        const topic = TestSubstrate.freshName("replaced")
        yield* feed.register("replacement-reader", { topics: [topic] })
        const id = yield* outbox.enqueue(topic, { v: 1 }, { dedupKey: "k", delay: "1 hour" })
        expect((yield* readUntil("replacement-reader", 1)).map((e) => e.payload)).toEqual([{ v: 1 }])
        const other = yield* outbox.enqueue(topic, { other: true })
        expect(yield* outbox.enqueue(topic, { v: 2 }, { dedupKey: "k", dedupMode: "replace", delay: "1 hour" })).toBe(
          id
        )
        const read = yield* readUntil("replacement-reader", 2)
        expect(read.map((e) => [e.id, e.payload])).toEqual([[other, { other: true }], [id, { v: 2 }]])
      }))

    it.effect("an aborted enqueue is never read", () =>
      Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const topic = TestSubstrate.freshName("aborted")
        yield* feed.register("aborted-reader", { topics: [topic] })
        const kept = yield* outbox.enqueue(topic, { kept: true })
        yield* Effect.flip(
          sql.withTransaction(Effect.andThen(outbox.enqueue(topic, { kept: false }), Effect.fail("abort")))
        )
        const late = yield* lateWriter(topic, { kept: "late" })
        expect((yield* readUntil("aborted-reader", 1)).map((e) => e.id)).toEqual([kept])
        expect(yield* drain("aborted-reader")).toEqual([])
        yield* late.commit
        expect((yield* readUntil("aborted-reader", 1)).map((e) => e.payload)).toEqual([{ kept: "late" }])
        expect(yield* drain("aborted-reader")).toEqual([])
      }))

    it.effect("a consumer starts at the beginning, at now, or at a time; reset moves it, and registering again is idempotent", () =>
      Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const topic = TestSubstrate.freshName("start")
        const before = yield* outbox.enqueue(topic, { at: "before" })
        // A time in whole milliseconds (what a Date holds), passed before the next enqueue.
        const [now] = yield* sql<
          { now: Date }
        >`SELECT date_trunc('milliseconds', clock_timestamp()) + interval '1 millisecond' AS now`
        yield* eventually(
          sql<{ passed: boolean }>`SELECT clock_timestamp() > ${now!.now} AS passed`,
          ([row]) => row!.passed
        )
        const since = yield* outbox.enqueue(topic, { at: "since" })
        // Created since the time, in flight while the consumers register: read when it commits.
        const late = yield* lateWriter(topic, { at: "late" })
        const sinceLate = yield* outbox.enqueue(topic, { at: "since, after the late one began" })
        yield* feed.register("from-beginning", { topics: [topic] })
        yield* feed.register("from-time", { topics: [topic], from: now!.now })
        yield* feed.register("from-now", { topics: [topic], from: "now" })
        yield* late.commit
        const next = yield* outbox.enqueue(topic, { at: "next" })
        const all = [before, since, late.id, sinceLate, next]
        expect((yield* readUntil("from-beginning", 5)).map((e) => e.id)).toEqual(all)
        // From the time: every message created since (the late one too); one created just before
        // may come too, while a transaction elsewhere in the cluster held the horizon then.
        const fromTime = (yield* readUntil("from-time", 4)).map((e) => e.id)
        expect([all, all.slice(1)]).toContainEqual(fromTime)
        // From now: every message committed after it (the late one); some committed just before
        // may come too, while a transaction held the horizon then.
        const fromNow = (yield* readUntil("from-now", 2)).map((e) => e.id)
        expect(all.map((_, i) => all.slice(i))).toContainEqual(fromNow)
        expect(fromNow).toContain(late.id)
        // Again with the same topics (any order, repeated): the same consumer, its cursor kept.
        const again = yield* feed.register("from-now", { topics: [topic, topic], from: "beginning" })
        expect(again.read).toBe(fromNow.length)
        const reset = yield* feed.reset("from-now", "beginning")
        expect(reset).toMatchObject({ position: "0", lastId: "0", read: fromNow.length })
        expect((yield* readUntil("from-now", 5)).map((e) => e.id)).toEqual(all)
        expect(yield* feed.remove("from-now")).toBe(true)
        expect(yield* feed.remove("from-now")).toBe(false)
        expect((yield* Effect.flip(feed.consume("from-now", () => Effect.void)))._tag).toBe("FeedConsumerMissing")
        expect((yield* Effect.flip(feed.reset("from-now", "now")))._tag).toBe("FeedConsumerMissing")
      }))

    it.effect("bad input is a typed refusal naming the rule, and nothing is written", () =>
      Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const topic = TestSubstrate.freshName("bad")
        yield* feed.register("typed", { topics: [topic] })
        const other = yield* Effect.flip(feed.register("typed", { topics: [topic, "another"] }))
        expect(other).toMatchObject({ _tag: "InvalidInput", argument: "topics" })
        yield* Effect.promise(() =>
          FastCheck.assert(
            FastCheck.asyncProperty(
              FastCheck.oneof(
                FastCheck.record({
                  name: FastCheck.constantFrom("", "x".repeat(129), "a\u0000b"),
                  topics: FastCheck.constant([topic])
                }),
                FastCheck.record({
                  name: FastCheck.constant("fresh"),
                  topics: FastCheck.oneof(
                    FastCheck.constant([] as Array<string>),
                    FastCheck.array(FastCheck.constant("t"), { minLength: 101, maxLength: 120 }),
                    FastCheck.array(FastCheck.constantFrom("", "a\u0000"), { minLength: 1, maxLength: 3 })
                  )
                })
              ),
              FastCheck.oneof(
                FastCheck.constant(0),
                FastCheck.constant(10_001),
                FastCheck.double(),
                FastCheck.constant(100)
              ),
              (args, limit) =>
                Effect.runPromise(Effect.gen(function*() {
                  const refused = yield* Effect.flip(feed.register(args.name, { topics: args.topics }))
                  expect(refused._tag).toBe("InvalidInput")
                  if (limit !== 100 && Number.isFinite(limit)) {
                    const badLimit = yield* Effect.flip(feed.consume("typed", () => Effect.void, { limit }))
                    expect(badLimit).toMatchObject({ _tag: "InvalidInput", argument: "limit" })
                  }
                }))
            ),
            { numRuns: 40 }
          )
        )
        expect((yield* feed.lag()).map((c) => c.name)).not.toContain("fresh")
        const badFrom = yield* Effect.flip(feed.register("typed-2", { topics: [topic], from: new Date(Number.NaN) }))
        expect(badFrom).toMatchObject({ _tag: "InvalidInput", argument: "from" })
      }))
  })

  // One connection: the session that records the new epoch is the one every write goes through,
  // as after a restore every session is new.
  it.layer(substrate({}, { maxConnections: 1 }))((it) => {
    it.effect("a new cluster (a restored dump) takes the next epoch: its positions start above every restored one", () =>
      Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const topic = TestSubstrate.freshName("epoch")
        yield* feed.register("across-lives", { topics: [topic] })
        const old = yield* outbox.enqueue(topic, { life: 1 })
        // As a restore into another cluster finds it: the lineage names a cluster that is not
        // this one. The first write of this session then records this cluster as the next epoch.
        const next = yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`UPDATE durable.feed_lineage SET system_identifier = 'a cluster the dump came from'`
          const [epoch] = yield* sql<{ epoch: string }>`SELECT durable.feed_epoch()::text AS epoch`
          expect(epoch!.epoch).toBe("2")
          return yield* outbox.enqueue(topic, { life: 2 })
        }))
        // A later cluster's dump restored back into this one (a cutover rolled back): this
        // cluster's epoch is no longer the latest, so it takes the next.
        const back = yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO durable.feed_lineage (epoch, system_identifier) VALUES (3, 'a cluster it was copied to')`
          const [epoch] = yield* sql<{ epoch: string }>`SELECT durable.feed_epoch()::text AS epoch`
          expect(epoch!.epoch).toBe("4")
          return yield* outbox.enqueue(topic, { life: 4 })
        }))
        const read = yield* readUntil("across-lives", 3)
        expect(read.map((e) => e.id)).toEqual([old, next, back])
        expect(read.map((e) => BigInt(e.position) >> 48n)).toEqual([1n, 2n, 4n])
      }))
  })
})
