// Retention of the outbox history by whole days: a purge empties every day before its cut-off,
// counted once, and drops it; the slow part (the file system freeing a day's files) runs under
// the day's own lock, so marks, which write today's day, never wait for it. The drop that
// follows holds the history's lock, for a moment.
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import { DurableSettings } from "../src/DurableConfig.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import { barrier, claimOf, enqueueAll, markAll, substrate } from "./support.js"

/** The history's day `daysAgo` UTC days back (made as `outbox_history_prepare` makes days); its name. */
const pastDay = (daysAgo: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const [day] = yield* sql<{ name: string; noon: string }>`
      SELECT 'outbox_history_' || to_char(d, 'YYYYMMDD') AS name,
             (d::timestamp AT TIME ZONE 'UTC' + interval '12 hours')::text AS noon
        FROM (SELECT (now() AT TIME ZONE 'UTC')::date - ${daysAgo}::int AS d) x`
    yield* sql.unsafe(`
      DO $$ DECLARE d date := (now() AT TIME ZONE 'UTC')::date - ${daysAgo}; BEGIN
        EXECUTE format('CREATE TABLE %I.%I PARTITION OF ${settings.table("outbox_history")}
                          FOR VALUES FROM (%L) TO (%L)', '${settings.schema}', 'outbox_history_' || to_char(d, 'YYYYMMDD'),
                       d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
      END $$`)
    return day!
  })

/** Delivers `n` fresh messages (now, or moved to the history's day at `noon`); their ids. */
const deliveredOn = (noon: string | undefined, n: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const topic = TestSubstrate.freshName("days")
    const ids = yield* enqueueAll(topic, n)
    yield* markAll(yield* claimOf("w1", [topic], n))
    if (noon !== undefined) {
      yield* sql`UPDATE ${sql.literal(settings.table("outbox_history"))} SET projected_at = ${noon}::timestamptz
                  WHERE id = ANY(${ids}::bigint[])`
    }
    return ids
  })

const dayExists = (name: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const [row] = yield* sql<{ exists: boolean }>`
      SELECT to_regclass(${`${settings.quotedSchema}."${name}"`}) IS NOT NULL AS exists`
    return row!.exists
  })

const deliveredBefore = (cutoff: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const [row] = yield* sql<{ n: number }>`
      SELECT count(*)::int AS n FROM ${sql.literal(settings.table("outbox_history"))}
       WHERE projected_at < ${sql.literal(cutoff)}`
    return row!.n
  })

/** Sessions of this database waiting for a lock on the history (the partitioned table itself). */
const waitingOnHistory = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const settings = yield* DurableSettings
  const [row] = yield* sql<{ n: number }>`
    SELECT count(*)::int AS n FROM pg_locks
     WHERE NOT granted AND relation = ${settings.table("outbox_history")}::regclass`
  return row!.n
})

describe("outbox history days", () => {
  it.layer(substrate({ lockTimeout: "5 seconds" }), { timeout: "60 seconds" })((it) => {
    it.effect("a purge empties and drops every whole day before its cut-off, and counts each message once", () =>
      Effect.gen(function*() {
        const admin = yield* OutboxAdmin.OutboxAdmin
        const old = yield* pastDay(5)
        const older = yield* pastDay(6)
        yield* deliveredOn(old.noon, 30)
        yield* deliveredOn(older.noon, 12)
        // And in the default partition: a day nobody made (four days back), deleted row by row.
        yield* deliveredOn(new Date(Date.now() - 4 * 86_400_000).toISOString(), 5)
        expect(yield* deliveredBefore("now() - interval '1 day'")).toBe(47)
        const purged = yield* admin.purge({ olderThan: "1 day" })
        expect(purged).toBe(47)
        expect(yield* dayExists(old.name)).toBe(false)
        expect(yield* dayExists(older.name)).toBe(false)
        expect(yield* deliveredBefore("now() - interval '1 day'")).toBe(0)
        expect(yield* admin.purge({ olderThan: "1 day" })).toBe(0)
      }))

    it.effect("two purges at once count a day once, and neither fails on a day the other dropped", () =>
      Effect.gen(function*() {
        const admin = yield* OutboxAdmin.OutboxAdmin
        const day = yield* pastDay(8)
        yield* deliveredOn(day.noon, 25)
        const gate = yield* barrier
        const [counts] = yield* Effect.all([
          Effect.all([
            Effect.andThen(gate.wait, admin.purge({ olderThan: "1 day" })),
            Effect.andThen(gate.wait, admin.purge({ olderThan: "1 day" }))
          ], { concurrency: "unbounded" }),
          gate.open
        ], { concurrency: "unbounded" })
        expect(counts[0] + counts[1]).toBe(25)
        expect(yield* dayExists(day.name)).toBe(false)
      }))

    it.effect("a day with messages is never dropped uncounted: the drop leaves it to the next purge", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const settings = yield* DurableSettings
        const admin = yield* OutboxAdmin.OutboxAdmin
        const day = yield* pastDay(10)
        yield* deliveredOn(day.noon, 9)
        // As if midnight had passed between the two calls: the day came before the cut-off unemptied.
        const [dropped] = yield* sql<{ n: number }>`
          SELECT ${sql.literal(settings.table("outbox_history_drop_before"))}(now() - interval '1 day') AS n`
        expect(dropped!.n).toBe(0)
        expect(yield* dayExists(day.name)).toBe(true)
        expect(yield* admin.purge({ olderThan: "1 day" })).toBe(9)
        expect(yield* dayExists(day.name)).toBe(false)
      }))

    it.effect("marks go on while a day is emptied; the drop holds the history's lock, for its transaction only", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const settings = yield* DurableSettings
        const day = yield* pastDay(12)
        yield* deliveredOn(day.noon, 20)
        const cutoff = sql.literal("now() - interval '1 day'")
        // Each step held open in a transaction of its own until released.
        const held = (fn: string) =>
          Effect.gen(function*() {
            const done = yield* Deferred.make<void>()
            const release = yield* Deferred.make<void>()
            const fiber = yield* sql.withTransaction(Effect.gen(function*() {
              yield* sql`SELECT ${sql.literal(settings.table(fn))}(${cutoff})`
              yield* Deferred.succeed(done, undefined)
              yield* Deferred.await(release)
            })).pipe(Effect.forkChild)
            yield* Deferred.await(done)
            return { release: Deferred.succeed(release, undefined), fiber }
          })
        const emptying = yield* held("outbox_history_empty_before")
        // A mark while the emptied day's transaction is open: it writes today's day and completes.
        yield* deliveredOn(undefined, 3).pipe(Effect.timeout("20 seconds"), TestClock.withLive)
        yield* emptying.release
        yield* Fiber.join(emptying.fiber)
        const dropping = yield* held("outbox_history_drop_before")
        expect(yield* dayExists(day.name)).toBe(true)
        // A mark while the drop's transaction is open waits for the history's lock (this is why the
        // files are freed before, by the emptying), then completes once the drop commits.
        const mark = yield* deliveredOn(undefined, 1).pipe(Effect.forkChild)
        yield* waitingOnHistory.pipe(
          Effect.repeat({ until: (n) => n >= 1, schedule: Schedule.spaced("10 millis") }),
          Effect.timeout("20 seconds"),
          TestClock.withLive
        )
        yield* dropping.release
        yield* Fiber.join(dropping.fiber)
        expect(yield* Fiber.join(mark)).toHaveLength(1)
        expect(yield* dayExists(day.name)).toBe(false)
      }))

    it.effect("a drop waits for the history before it takes a day: a transaction that wrote the history then reads it all goes on", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const settings = yield* DurableSettings
        const day = yield* pastDay(14)
        yield* deliveredOn(day.noon, 4)
        yield* sql`SELECT ${sql.literal(settings.table("outbox_history_empty_before"))}(now() - interval '1 day')`
        const topic = TestSubstrate.freshName("reader")
        yield* enqueueAll(topic, 1)
        const [message] = yield* claimOf("w1", [topic], 1)
        // A transaction that marks (a write to the history) and, later, reads the whole history.
        const wrote = yield* Deferred.make<void>()
        const read = yield* Deferred.make<void>()
        const writer = yield* sql.withTransaction(Effect.gen(function*() {
          yield* markAll([message!])
          yield* Deferred.succeed(wrote, undefined)
          yield* Deferred.await(read)
          return (yield* sql<{ n: number }>`
            SELECT count(*)::int AS n FROM ${sql.literal(settings.table("outbox_history"))}`)[0]!.n
        })).pipe(Effect.forkChild)
        yield* Deferred.await(wrote)
        const drop = yield* sql<{ n: number }>`
          SELECT ${sql.literal(settings.table("outbox_history_drop_before"))}(now() - interval '1 day') AS n`.pipe(
          Effect.forkChild
        )
        // The drop waits for the history's lock, holding no day: the writer's read takes every day.
        yield* waitingOnHistory.pipe(
          Effect.repeat({ until: (n) => n >= 1, schedule: Schedule.spaced("10 millis") }),
          Effect.timeout("20 seconds"),
          TestClock.withLive
        )
        yield* Deferred.succeed(read, undefined)
        expect(yield* Fiber.join(writer)).toBeGreaterThanOrEqual(1)
        expect((yield* Fiber.join(drop))[0]!.n).toBe(1)
        expect(yield* dayExists(day.name)).toBe(false)
      }))
  })
})
