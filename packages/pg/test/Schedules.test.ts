// Schedules on a real PostgreSQL: one message per slot however many deciders race, the overlap
// policies against real message states, catch-up, pause and resume, backfill, daylight saving,
// typed refusals; time on TestClock (the decisions read Effect's clock).
import { eventually } from "@effect-durable/testing/Eventually"
import * as Fixture from "@effect-durable/testing/Fixture"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { describe, expect, it } from "@effect/vitest"
import * as Cron from "effect/Cron"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import * as FastCheck from "fast-check"
import { fileURLToPath } from "node:url"
import * as Plan from "../src/internal/schedules/plan.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import * as Schedules from "../src/Schedules.js"
import { substrate } from "./support.js"

const MINUTE = 60_000
const T0 = Date.parse("2026-12-04T10:00:00.000Z")

/** The slots of a schedule that got a message, as ISO text, and how many messages its topic has. */
const slotsOf = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ slot: string; outcome: string }>`
      SELECT to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS slot, outcome
        FROM durable.schedule_slots WHERE schedule = ${name} ORDER BY slot`.pipe(Effect.orDie))

const messagesOf = (topic: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<
        { id: string; slot: string }
      >`SELECT o.id::text AS id, o.headers->>'schedule-slot' AS slot FROM durable.outbox_messages o
                                       WHERE o.topic = ${topic} ORDER BY o.id`.pipe(Effect.orDie)
  )

/** A schedule as `list` shows it, its slots as `toISOString` writes them. */
const infoOf = (name: string) =>
  Effect.flatMap(Schedules.Schedules, (s) =>
    Effect.map(s.list, (all) => {
      const info = all.find((i) => i.name === name)!
      return { ...info, nextSlot: new Date(info.nextSlot).toISOString() }
    }))

/** Three deciders of their own (as three processes have), over the same database. */
const deciders = Effect.all([Schedules.make, Schedules.make, Schedules.make])

describe("Schedules: the plan of a decision (no database)", () => {
  const crons = ["* * * * *", "*/5 * * * *", "0 * * * *", "*/20 * * * * *", "0 9 * * 1-5"].map((text) =>
    Result.getOrThrow(Cron.parse(text, "UTC"))
  )
  it("every slot in [cursor, now] is run or missed exactly once, runs are in the window and in order, next is after now", () => {
    FastCheck.assert(
      FastCheck.property(
        FastCheck.integer({ min: 0, max: crons.length - 1 }),
        FastCheck.integer({ min: 0, max: 240 }),
        FastCheck.integer({ min: 0, max: 300 }),
        FastCheck.boolean(),
        (which, gapMinutes, catchUpMinutes, paused) => {
          const cron = crons[which]!
          const cursor = new Date(T0)
          const now = new Date(T0 + gapMinutes * MINUTE)
          const decided = Plan.plan({ cron, cursor, now, catchUpMillis: catchUpMinutes * MINUTE, paused })
          const all: Array<number> = []
          for (let s = Cron.match(cron, cursor) ? cursor : Cron.next(cron, cursor); s <= now; s = Cron.next(cron, s)) {
            all.push(s.getTime())
            if (all.length > 5000) break
          }
          if (all.length <= Plan.MAX_COUNTED_MISSED) {
            expect(decided.missed + decided.run.length).toBe(all.length)
            expect(decided.missedAtLeast).toBe(false)
          }
          const runs = decided.run.map((d) => d.getTime())
          expect(runs).toEqual(all.slice(all.length - runs.length))
          if (paused) expect(runs).toEqual([])
          for (const run of runs) expect(run).toBeGreaterThanOrEqual(now.getTime() - catchUpMinutes * MINUTE)
          expect(decided.next.getTime()).toBeGreaterThan(now.getTime())
        }
      ),
      { numRuns: 100 }
    )
  })
})

describe("Schedules", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("three deciders racing over a simulated hour: every 5-minute slot exactly once, in order", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        const [a, b, c] = yield* deciders
        yield* a.define({ name: "race", cron: "*/5 * * * *", topic: "sched.race", payload: { n: 1 }, overlap: "allow" })
        for (let minute = 1; minute <= 60; minute++) {
          yield* TestClock.adjust("1 minute")
          yield* Effect.all([a.decideDue, b.decideDue, c.decideDue], { concurrency: "unbounded" })
        }
        const expected = Array.from({ length: 12 }, (_, i) => new Date(T0 + (i + 1) * 5 * MINUTE).toISOString())
        expect((yield* slotsOf("race")).map((s) => s.slot)).toEqual(expected)
        expect((yield* messagesOf("sched.race")).map((m) => m.slot)).toEqual(expected)
        expect(yield* infoOf("race")).toMatchObject({ enqueued: 12, skipped: 0, missed: 0 })
      }))

    it.effect("overlap: skip waits for the open message, buffer-one keeps one waiting behind a running one, allow takes every slot", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        const schedules = yield* Schedules.Schedules
        const worker = yield* OutboxWorker.OutboxWorker
        for (const overlap of Schedules.OVERLAPS) {
          yield* schedules.define({ name: `ov-${overlap}`, cron: "* * * * *", topic: `sched.ov.${overlap}`, overlap })
        }
        const step = Effect.andThen(TestClock.adjust("1 minute"), schedules.decideDue)
        yield* step // slot 1: each enqueues
        yield* step // slot 2: skip skips (1 open); buffer-one skips (1 waiting); allow enqueues
        const claimed = yield* worker.claim({ worker: "w", topics: ["sched.ov.buffer-one"], limit: 1, lease: "1 hour" })
        yield* step // slot 3: buffer-one's first is running, nothing waits: enqueued
        yield* step // slot 4: buffer-one has one waiting: skipped
        const [skipFirst] = yield* worker.claim({ worker: "w", topics: ["sched.ov.skip"], limit: 1, lease: "1 hour" })
        yield* worker.markProjectedMany([skipFirst!.claim])
        yield* step // slot 5: skip's message is done: enqueued
        expect((yield* slotsOf("ov-skip")).map((s) => s.outcome)).toEqual([
          "enqueued",
          "skipped",
          "skipped",
          "skipped",
          "enqueued"
        ])
        expect((yield* slotsOf("ov-buffer-one")).map((s) => s.outcome)).toEqual([
          "enqueued",
          "skipped",
          "enqueued",
          "skipped",
          "skipped"
        ])
        expect(claimed).toHaveLength(1)
        expect((yield* slotsOf("ov-allow")).map((s) => s.outcome)).toEqual(Array(5).fill("enqueued"))
        expect(yield* infoOf("ov-skip")).toMatchObject({ enqueued: 2, skipped: 3 })
      }))

    it.effect("after downtime: slots in the catch-up window run (through the overlap policy), older ones are counted missed", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        const schedules = yield* Schedules.Schedules
        yield* schedules.define({
          name: "down-allow",
          cron: "* * * * *",
          topic: "sched.down.allow",
          overlap: "allow",
          catchUp: "10 minutes"
        })
        yield* schedules.define({
          name: "down-skip",
          cron: "* * * * *",
          topic: "sched.down.skip",
          catchUp: "10 minutes"
        })
        yield* TestClock.adjust("60 minutes") // nobody decided for an hour
        yield* schedules.decideDue
        const allow = yield* slotsOf("down-allow")
        expect(allow.map((s) => s.slot)).toEqual(
          Array.from({ length: 11 }, (_, i) => new Date(T0 + (50 + i) * MINUTE).toISOString())
        )
        expect(yield* infoOf("down-allow")).toMatchObject({ enqueued: 11, missed: 49 })
        expect((yield* slotsOf("down-skip")).map((s) => s.outcome)).toEqual(["enqueued", ...Array(10).fill("skipped")])
        expect(yield* infoOf("down-skip")).toMatchObject({ enqueued: 1, skipped: 10, missed: 49 })
      }))

    it.effect("pause: nothing is enqueued; resume starts at the next slot with the passed ones counted missed", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        const schedules = yield* Schedules.Schedules
        yield* schedules.define({ name: "paused", cron: "* * * * *", topic: "sched.paused", overlap: "allow" })
        expect(yield* schedules.pause("paused", { by: "ops" })).toBe(true)
        expect(yield* schedules.pause("paused")).toBe(false)
        yield* TestClock.adjust("30 minutes")
        yield* schedules.decideDue
        expect(yield* infoOf("paused")).toMatchObject({ paused: true, pausedBy: "ops", enqueued: 0 })
        expect(yield* schedules.resume("paused")).toBe(true)
        expect(yield* infoOf("paused")).toMatchObject({
          paused: false,
          missed: 30,
          nextSlot: new Date(T0 + 31 * MINUTE).toISOString()
        })
        expect(yield* slotsOf("paused")).toEqual([])
        yield* TestClock.adjust("1 minute")
        yield* schedules.decideDue
        expect((yield* slotsOf("paused")).map((s) => s.slot)).toEqual([new Date(T0 + 31 * MINUTE).toISOString()])
      }))

    it.effect("backfill enqueues each slot of the range without a message, once; repeated, it enqueues none", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        const schedules = yield* Schedules.Schedules
        yield* schedules.define({ name: "fill", cron: "*/10 * * * *", topic: "sched.fill", overlap: "skip" })
        yield* TestClock.adjust("10 minutes")
        yield* schedules.decideDue // 10:10 on time
        expect((yield* slotsOf("fill")).map((s) => s.outcome)).toEqual(["enqueued"])
        const range = { from: new Date(T0 - 60 * MINUTE), to: new Date(T0 + 20 * MINUTE) }
        expect(yield* schedules.backfill("fill", range)).toEqual({ enqueued: 7, present: 1 })
        expect(yield* schedules.backfill("fill", range)).toEqual({ enqueued: 0, present: 8 })
        expect((yield* messagesOf("sched.fill")).length).toBe(8)
        expect(yield* infoOf("fill")).toMatchObject({ enqueued: 1, backfilled: 7 })
      }))

    it.effect("D11: daylight saving in Europe/Berlin, through the runner's pass: 02:30 runs at 03:30 CEST the night clocks go forward, once the night they go back", () =>
      Effect.gen(function*() {
        const schedules = yield* Schedules.Schedules
        // The runner's pass, hour by hour over three nights (not a backfill: the runner lost the
        // spring-forward run, uncounted, while a backfill of the same night found it).
        const hourly = (name: string, from: string) =>
          Effect.gen(function*() {
            yield* TestClock.setTime(Date.parse(from))
            yield* schedules.define({
              name,
              cron: "30 2 * * *",
              timeZone: "Europe/Berlin",
              topic: "sched.dst",
              overlap: "allow"
            })
            for (let hour = 1; hour <= 72; hour++) {
              yield* TestClock.adjust("1 hour")
              yield* schedules.decideDue
            }
            return (yield* slotsOf(name)).map((s) => s.slot)
          })
        expect(yield* hourly("dst-spring", "2026-03-28T00:00:00Z")).toEqual([
          "2026-03-28T01:30:00.000Z", // CET
          "2026-03-29T01:30:00.000Z", // 02:30 does not exist: 03:30 CEST
          "2026-03-30T00:30:00.000Z" // CEST
        ])
        expect(yield* infoOf("dst-spring")).toMatchObject({ enqueued: 3, missed: 0 })
        yield* schedules.remove("dst-spring")
        expect(yield* hourly("dst-fall", "2026-10-24T00:00:00Z")).toEqual([
          "2026-10-24T00:30:00.000Z", // CEST
          "2026-10-25T00:30:00.000Z", // the first 02:30 only
          "2026-10-26T01:30:00.000Z" // CET
        ])
        expect(yield* infoOf("dst-fall")).toMatchObject({ enqueued: 3, missed: 0 })
      }))

    it.effect("redefined: the same cron keeps its cursor, another one restarts at its next slot; removed, it is gone", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        const schedules = yield* Schedules.Schedules
        yield* schedules.define({ name: "re", cron: "0 * * * *", topic: "sched.re" })
        yield* TestClock.adjust("10 minutes")
        yield* schedules.define({ name: "re", cron: "0 * * * *", topic: "sched.re2", payload: { v: 2 } })
        expect(yield* infoOf("re")).toMatchObject({
          topic: "sched.re2",
          nextSlot: new Date(T0 + 60 * MINUTE).toISOString()
        })
        yield* schedules.define({ name: "re", cron: "*/15 * * * *", topic: "sched.re2" })
        expect(yield* infoOf("re")).toMatchObject({ nextSlot: new Date(T0 + 15 * MINUTE).toISOString() })
        expect(yield* schedules.remove("re")).toBe(true)
        expect(yield* schedules.remove("re")).toBe(false)
      }))

    it.effect("bad input is a typed refusal naming the rule, and nothing is written", () =>
      Effect.gen(function*() {
        const schedules = yield* Schedules.Schedules
        const base = { name: "bad", cron: "* * * * *", topic: "sched.bad" }
        const refused = (definition: Schedules.ScheduleDefinition) =>
          Effect.map(
            Effect.flip(schedules.define(definition)),
            (error) => [error._tag, error._tag === "InvalidInput" ? error.argument : error.message]
          )
        expect(yield* refused({ ...base, cron: "61 * * * *" })).toEqual(["InvalidInput", "cron"])
        expect(yield* refused({ ...base, cron: "* * *" })).toEqual(["InvalidInput", "cron"])
        expect(yield* refused({ ...base, timeZone: "Mars/Olympus" })).toEqual(["InvalidInput", "timeZone"])
        expect(yield* refused({ ...base, catchUp: Number.NaN })).toEqual(["InvalidInput", "catchUp"])
        expect(yield* refused({ ...base, catchUp: -1 })).toEqual(["InvalidInput", "catchUp"])
        expect(yield* refused({ ...base, overlap: "sometimes" as never })).toEqual(["InvalidInput", "overlap"])
        expect(yield* refused({ ...base, name: "x".repeat(200) })).toEqual(["InvalidInput", "name"])
        expect(yield* refused({ ...base, name: "nul\u0000" })).toEqual(["InvalidInput", "name"])
        expect(yield* refused({ ...base, payload: { n: 1n } })).toEqual(["InvalidInput", "payload"])
        expect(yield* refused({ ...base, payload: { f: Number.NaN } })).toEqual(["InvalidInput", "payload"])
        expect((yield* schedules.list).some((s) => s.name === "bad")).toBe(false)
        const backfill = (range: { from: Date; to: Date }, name = "bad") =>
          Effect.map(
            Effect.flip(schedules.backfill(name, range)),
            (error) => error._tag === "InvalidInput" ? error.argument : error.message
          )
        yield* schedules.define(base)
        expect(yield* backfill({ from: new Date(T0), to: new Date(T0) })).toBe("to")
        expect(yield* backfill({ from: new Date(Number.NaN), to: new Date(T0) })).toBe("from")
        expect(yield* backfill({ from: new Date(T0), to: new Date(T0 + 30 * 24 * 60 * MINUTE) })).toBe("to")
        expect(yield* backfill({ from: new Date(T0), to: new Date(T0 + MINUTE) }, "nobody")).toBe("name")
        expect((yield* messagesOf("sched.bad")).length).toBe(0)
        // Inside a caller's transaction a refusal leaves it usable.
        const sql = yield* SqlClient.SqlClient
        const after = yield* sql.withTransaction(
          Effect.andThen(
            Effect.exit(schedules.backfill("nobody", { from: new Date(T0), to: new Date(T0 + MINUTE) })),
            sql`SELECT 1 AS one`
          )
        )
        expect(after).toEqual([{ one: 1 }])
        expect(Exit.isExit(yield* Effect.exit(schedules.remove("bad")))).toBe(true)
      }))
  })
})

/** Whole seconds from the first slot on, as many as there are: the slots of a per-second schedule with none missing. */
const everySecond = (slots: ReadonlyArray<string>) => {
  const first = Date.parse(slots[0]!)
  return Array.from({ length: slots.length }, (_, i) => new Date(first + i * 1000).toISOString())
}

const scheduler = fileURLToPath(new URL("./fixtures/scheduler.ts", import.meta.url))

describe("Schedules, running for real", () => {
  it.layer(substrate(), { timeout: "2 minutes", excludeTestServices: true })((it) => {
    it.effect("three runners in one database: a per-second schedule gets one message per second, none twice, none skipped", () =>
      Effect.gen(function*() {
        const schedules = yield* Schedules.Schedules
        yield* schedules.define({ name: "live", cron: "* * * * * *", topic: "sched.live", overlap: "allow" })
        const runner = Schedules.layerRunner({ pollInterval: "100 millis" }).pipe(
          Layer.provide(Layer.succeedContext(yield* Effect.context<never>()))
        )
        yield* eventually(slotsOf("live"), (slots) => slots.length >= 4, 30).pipe(
          Effect.provide(Layer.mergeAll(Layer.fresh(runner), Layer.fresh(runner), Layer.fresh(runner)))
        )
        const slots = (yield* slotsOf("live")).map((s) => s.slot)
        expect(slots).toEqual(everySecond(slots))
        expect((yield* messagesOf("sched.live")).map((m) => m.slot)).toEqual(slots)
      }))

    it.effect("a runner process killed mid-way: the next one runs every slot the outage passed (within the catch-up window), once", () =>
      Effect.gen(function*() {
        const schedules = yield* Schedules.Schedules
        const sql = yield* SqlClient.SqlClient
        const db = yield* TestDatabase.TestDatabase
        yield* schedules.define({
          name: "restart",
          cron: "* * * * * *",
          topic: "sched.restart",
          overlap: "allow",
          catchUp: "1 minute"
        })
        const { child, exited, stderr } = Fixture.spawn(scheduler, {
          SCHEDULER_TEST_DATABASE_URL: Redacted.value(db.url)
        })
        yield* eventually(slotsOf("restart"), (slots) => slots.length >= 2, 60).pipe(
          Effect.tapError(() => Effect.sync(() => console.error(stderr())))
        )
        child.kill("SIGKILL")
        expect(yield* Effect.promise(() => exited)).toBe("SIGKILL")
        // Down for three slots at least, by the database's clock.
        const [{ killed }] = (yield* sql<{ killed: string }>`SELECT now()::text AS killed`) as [{ killed: string }]
        yield* eventually(
          sql<{ passed: boolean }>`SELECT now() > ${killed}::timestamptz + interval '3 seconds' AS passed`,
          ([row]) => row!.passed,
          30
        )
        const before = (yield* slotsOf("restart")).length
        // The next process catches up.
        const runner = Schedules.layerRunner({ pollInterval: "100 millis" }).pipe(
          Layer.provide(Layer.succeedContext(yield* Effect.context<never>()))
        )
        yield* eventually(slotsOf("restart"), (slots) => slots.length >= before + 4, 30).pipe(Effect.provide(runner))
        const slots = (yield* slotsOf("restart")).map((s) => s.slot)
        expect(slots).toEqual(everySecond(slots))
        expect((yield* messagesOf("sched.restart")).map((m) => m.slot)).toEqual(slots)
        expect(yield* infoOf("restart")).toMatchObject({ missed: 0 })
      }))
  })
})
