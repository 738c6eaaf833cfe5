// Schedules as an attacker and a careless operator use them (issue 42): a backfill into the
// runner's slots, a slot already recorded, a schedule whose decision fails, a cron whose date
// never comes, a frequent schedule far behind with a long catch-up window; and the plan of
// every decision across each daylight-saving transition of a year in five real time zones,
// held to an oracle that reads the zones' offsets from Intl.
import { describe, expect, it } from "@effect/vitest"
import * as Cron from "effect/Cron"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import * as Plan from "../src/internal/schedules/plan.js"
import * as Schedules from "../src/Schedules.js"
import { substrate } from "./support.js"

const MINUTE = 60_000
const HOUR = 60 * MINUTE
const DAY = 24 * HOUR
const T0 = Date.parse("2026-12-04T10:00:00.000Z")

const slotsOf = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ slot: string; outcome: string }>`
      SELECT to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS slot, outcome
        FROM durable.schedule_slots WHERE schedule = ${name} ORDER BY slot`.pipe(Effect.orDie))

const messageCount = (topic: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.outbox_messages WHERE topic = ${topic}`.pipe(
        Effect.map(([row]) => row!.n),
        Effect.orDie
      )
  )

describe("Schedules, attacked", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("D10: a backfill into the runner's slots (from now to now + 10 s) is refused naming the rule; the schedules go on", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        const schedules = yield* Schedules.Schedules
        yield* schedules.define({ name: "d10-a", cron: "* * * * * *", topic: "sched.d10", overlap: "allow" })
        yield* schedules.define({ name: "d10-b", cron: "* * * * * *", topic: "sched.d10b", overlap: "allow" })
        const refused = yield* Effect.flip(
          schedules.backfill("d10-a", { from: new Date(T0), to: new Date(T0 + 10_000) })
        )
        expect(refused).toMatchObject({ _tag: "InvalidInput", argument: "to" })
        expect(refused._tag === "InvalidInput" && refused.rule).toMatch(/next slot .* runner's/)
        expect(yield* slotsOf("d10-a")).toEqual([])
        yield* TestClock.adjust("3 seconds")
        yield* schedules.decideDue
        expect((yield* slotsOf("d10-a")).length).toBe(3)
        expect((yield* slotsOf("d10-b")).length).toBe(3)
      }))

    it.effect("D10: a slot already recorded is passed over, and a schedule whose decision fails never stops another", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        const sql = yield* SqlClient.SqlClient
        const schedules = yield* Schedules.Schedules
        // Oldest first: the two broken schedules fall due before the healthy one.
        yield* schedules.define({ name: "d10-recorded", cron: "*/10 * * * * *", topic: "sched.rec", overlap: "allow" })
        yield* schedules.define({ name: "d10-broken", cron: "*/10 * * * * *", topic: "sched.broken" })
        yield* TestClock.adjust("1 second")
        yield* schedules.define({ name: "d10-healthy", cron: "* * * * * *", topic: "sched.healthy", overlap: "allow" })
        // What a backfill of an earlier release left in the runner's slots: the next slot, decided.
        yield* sql`INSERT INTO durable.schedule_slots (schedule, slot, outcome, decided_by)
                   VALUES ('d10-recorded', ${new Date(T0 + 10_000).toISOString()}::timestamptz, 'skipped', 'test')`
        // A stored cron that no longer evaluates (written by hand, or by a release that read it otherwise).
        yield* sql`UPDATE durable.schedules SET cron = 'not a cron' WHERE name = 'd10-broken'`
        yield* TestClock.adjust("20 seconds")
        yield* schedules.decideDue
        expect((yield* slotsOf("d10-recorded")).map((s) => s.outcome)).toEqual(["skipped", "enqueued"])
        expect(yield* messageCount("sched.rec")).toBe(1)
        expect(yield* messageCount("sched.broken")).toBe(0)
        expect(yield* messageCount("sched.healthy")).toBe(20)
      }))

    it.effect("D15: a cron whose date never comes (0 0 30 2 *) is a typed refusal naming the cron, nothing written", () =>
      Effect.gen(function*() {
        const schedules = yield* Schedules.Schedules
        for (const cron of ["0 0 30 2 *", "0 0 31 4 *", "0 0 0 31 11 *"]) {
          const refused = yield* Effect.flip(schedules.define({ name: "d15", cron, topic: "sched.d15" }))
          expect(refused).toMatchObject({ _tag: "InvalidInput", argument: "cron" })
        }
        expect((yield* schedules.list).some((s) => s.name === "d15")).toBe(false)
      }))

    it.effect("H21: a per-second schedule 24 hours behind with a 365-day catch-up runs its latest 1,000 slots; the rest are counted missed", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        const schedules = yield* Schedules.Schedules
        yield* schedules.define({
          name: "h21",
          cron: "* * * * * *",
          topic: "sched.h21",
          overlap: "allow",
          catchUp: "365 days"
        })
        yield* TestClock.adjust("24 hours")
        yield* schedules.decideDue
        const slots = yield* slotsOf("h21")
        expect(slots.length).toBe(Plan.MAX_RUN_PER_DECISION)
        expect(slots.at(-1)!.slot).toBe(new Date(T0 + DAY).toISOString())
        const [info] = (yield* schedules.list).filter((s) => s.name === "h21")
        expect(info!.missed).toBeGreaterThanOrEqual(Plan.MAX_COUNTED_MISSED)
      }))
  })
})

describe("H21: the work of one decision is bounded, however far behind", () => {
  it("a per-second cron a day behind with a 365-day window evaluates at most the runs and the counted misses", () => {
    const cron = Result.getOrThrow(Cron.parse("* * * * * *", "UTC"))
    const decided = Plan.plan({
      cron,
      cursor: new Date(T0),
      now: new Date(T0 + DAY),
      catchUpMillis: 365 * DAY,
      paused: false
    })
    expect(decided.run.length).toBe(Plan.MAX_RUN_PER_DECISION)
    expect(decided.run.at(-1)!.getTime()).toBe(T0 + DAY)
    expect(decided).toMatchObject({ missed: Plan.MAX_COUNTED_MISSED, missedAtLeast: true })
    expect(decided.evaluated).toBeLessThanOrEqual(Plan.MAX_RUN_PER_DECISION + Plan.MAX_COUNTED_MISSED + 8)
  })
})

// --- the daylight-saving sweep ------------------------------------------------------------------

/** A zone's UTC offset at an instant (ms), read from Intl: independent of Effect's Cron. */
const offsetIn = (zone: string) => {
  const format = new Intl.DateTimeFormat("en-US", {
    timeZone: zone,
    hourCycle: "h23",
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit"
  })
  return (at: number) => {
    const p = Object.fromEntries(format.formatToParts(new Date(at)).map((part) => [part.type, part.value]))
    return Date.UTC(+p.year!, +p.month! - 1, +p.day!, +p.hour!, +p.minute!, +p.second!) - Math.floor(at / 1000) * 1000
  }
}

/**
 * The instant of a local wall time (`wall`: its fields as if UTC), as docs/schedules.md says a
 * schedule runs: a time that occurs twice, at its first occurrence; a time that does not exist
 * (spring forward), shifted by the gap (02:30 becomes 03:30).
 */
const instantOf = (offset: (at: number) => number) => (wall: number) => {
  const before = offset(wall - DAY)
  const candidates = [...new Set([before, offset(wall + DAY)])].map((o) => wall - o)
  const valid = candidates.filter((at) => at + offset(at) === wall)
  return valid.length > 0 ? Math.min(...valid) : wall - before
}

/** A small deterministic generator, so a failure repeats. */
const steps = (seed: number) => {
  let state = seed
  return (max: number) => {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31
    return 1 + (state % max)
  }
}

const ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe", "Asia/Kolkata"]
/** Each cron with the local hours and minute it names. */
const CRONS: ReadonlyArray<readonly [string, ReadonlyArray<number>, number]> = [
  ["30 2 * * *", [2], 30],
  ["0 2 * * *", [2], 0],
  ["45 1 * * *", [1], 45],
  ["15 3 * * *", [3], 15],
  ["0 * * * *", Array.from({ length: 24 }, (_, h) => h), 0]
]
const YEAR_START = Date.UTC(2026, 0, 2)
const YEAR_END = Date.UTC(2026, 11, 31)

/** The runs a schedule owes over 2026 in `zone`, by the oracle. */
const owed = (zone: string, hours: ReadonlyArray<number>, minute: number) => {
  const instant = instantOf(offsetIn(zone))
  const runs = new Set<number>()
  for (let day = YEAR_START; day < YEAR_END; day += DAY) {
    for (const hour of hours) runs.add(instant(day + hour * HOUR + minute * MINUTE))
  }
  return [...runs].sort((a, b) => a - b)
}

/** The runner over the year: each decision at a random later time, as `decide.ts` applies the plan. */
const simulate = (
  cron: Cron.Cron,
  from: number,
  until: number,
  maxStep: number,
  catchUpMillis: number,
  seed: number
) => {
  const step = steps(seed)
  let cursor = Cron.next(cron, new Date(from))
  const run: Array<number> = []
  let missed = 0
  for (let now = from; now < until;) {
    now = Math.min(until, now + step(maxStep) * MINUTE)
    const decided = Plan.plan({ cron, cursor, now: new Date(now), catchUpMillis, paused: false })
    expect(decided.missedAtLeast).toBe(false)
    for (const slot of decided.run) expect(slot.getTime()).toBeGreaterThanOrEqual(now - catchUpMillis)
    run.push(...decided.run.map((slot) => slot.getTime()))
    missed += decided.missed
    cursor = decided.next
  }
  return { run, missed }
}

describe("D11: the scheduler across every daylight-saving transition of 2026, in five time zones", () => {
  for (const zone of ZONES) {
    it(`${zone}: every run where docs/schedules.md says, once; nothing missed while the runner keeps up`, () => {
      for (const [text, hours, minute] of CRONS) {
        const cron = Result.getOrThrow(Cron.parse(text, zone))
        const expected = owed(zone, hours, minute)
        const from = expected[0]! - 1
        const until = expected.at(-1)!
        const { missed, run } = simulate(cron, from, until, 23 * 60, DAY, text.length + zone.length)
        expect({ zone, text, missed }).toEqual({ zone, text, missed: 0 })
        expect(run.map((at) => new Date(at).toISOString())).toEqual(expected.map((at) => new Date(at).toISOString()))
      }
    })

    it(`${zone}: with outages longer than the catch-up window, each owed slot is run or counted missed, exactly once`, () => {
      for (const [text, hours, minute] of CRONS) {
        const cron = Result.getOrThrow(Cron.parse(text, zone))
        const expected = owed(zone, hours, minute)
        const { missed, run } = simulate(cron, expected[0]! - 1, expected.at(-1)!, 3 * 24 * 60, HOUR, zone.length * 7)
        expect(new Set(run).size).toBe(run.length)
        for (const at of run) expect(expected).toContain(at)
        expect(run.length + missed).toBe(expected.length)
        expect(missed).toBeGreaterThan(0)
      }
    })
  }
})
