// What an outside probe found in the command, each proven fixed on the built binary: a value
// that starts with '-' (a negative duration) or a date that does not exist is a refusal naming
// the flag and its rule, exit code 2, and nothing is done.
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Schedules from "@effect-durable/pg/Schedules"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import { cliOn, enqueue, freshTopic, rowsOf, Substrate } from "./support.js"

describe("hardening of the command", () => {
  it.layer(Substrate, { timeout: "180 seconds" })((it) => {
    it.effect("D17: purge outbox --older-than -12h is refused naming the flag, exit code 2, nothing purged", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = sql.literal((yield* DurableSettings).table("outbox_history"))
        const topic = freshTopic("d17")
        yield* enqueue(topic, 1)
        const worker = yield* OutboxWorker.OutboxWorker
        const [claimed] = yield* worker.claim({ worker: "test", topics: [topic], limit: 1, lease: "1 minute" })
        yield* worker.markProjected(claimed!.claim)
        yield* sql`UPDATE ${table} SET projected_at = now() - interval '2 days', created_at = now() - interval '2 days'
                    WHERE topic = ${topic}`
        // A purge of 12h would delete it: the message is there to be purged.
        const dry = yield* cliOn(["purge", "outbox", "--older-than", "12h", "--dry-run", "--json"])
        expect(JSON.parse(dry.stdout).wouldDelete).toBeGreaterThanOrEqual(1)
        const refused = yield* cliOn(["purge", "outbox", "--older-than", "-12h"])
        expect(refused.code).toBe(2)
        expect(refused.stdout).toBe("") // no help text
        expect(refused.stderr).toMatch(
          /^effect-durable: --older-than expects a duration of zero or more, .*got '-12h'$/m
        )
        expect(yield* rowsOf(topic)).toEqual([{ id: claimed!.id, dead: false, projected: true, attempts: 1 }])
      }))

    it.effect("D17: every duration and number flag given a value that starts with '-' is refused naming the flag, exit code 2, no help or version printed", () =>
      Effect.gen(function*() {
        const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
          [["purge", "inbox", "--older-than", "-1.5d", "--dry-run"], "--older-than"],
          [["purge", "outbox", "--older-than", "12h", "--batch-size", "-1h", "--dry-run"], "--batch-size"],
          [["dead-letters", "list", "--older-than", "-3d"], "--older-than"],
          [["dead-letters", "list", "--limit", "-5h"], "--limit"],
          [["dead-letters", "redrive", "--all", "--batch-size", "-2h", "--yes"], "--batch-size"],
          [["workflows", "purge", "--older-than", "-1d"], "--older-than"],
          [["workflows", "list", "--limit", "-1v"], "--limit"],
          [["explain", "--limit", "-1h"], "--limit"],
          [["status", "--watch", "--interval", "-2s"], "--interval"],
          [["dashboard", "--statement-timeout", "-1s"], "--statement-timeout"],
          [["dashboard", "--port", "-1h"], "--port"],
          [["limits", "set", "t", "--max", "-1h"], "--max"],
          [["limits", "set", "t", "--group-max", "-2h"], "--group-max"],
          [["limits", "set", "t", "--rate", "-10/1m"], "--rate"],
          [["limits", "set", "t", "--rate", "10/1m", "--burst", "-1h"], "--burst"],
          [["limits", "group", "t", "g", "--weight", "-1h"], "--weight"],
          [["limits", "inbox", "set", "c", "--max", "-1v"], "--max"],
          [["schedules", "backfill", "s", "--from", "-2026-12-01T00:00:00Z", "--to", "2026-12-02T00:00:00Z"], "--from"],
          // Alone, a dash value is no flag: refused, never read as -1, -2 and -h.
          [["purge", "outbox", "-12h"], "-12h"]
        ]
        const results = yield* Effect.forEach(cases, ([args]) => cliOn(args), { concurrency: 2 })
        for (const [i, [args, flag]] of cases.entries()) {
          const result = results[i]!
          expect(result.code, args.join(" ")).toBe(2)
          expect(result.stdout, args.join(" ")).toBe("")
          expect(result.stderr, args.join(" ")).toMatch(/^effect-durable: /)
          expect(result.stderr, args.join(" ")).toContain(flag)
        }
        expect((yield* (yield* FlowControl.FlowControl).limits).some((l) => l.topic === "t")).toBe(false)
      }))

    it.effect("H20: schedules backfill --from 2026-02-30T00:00:00Z (a date that does not exist) is refused naming the flag and the rule, exit code 2, nothing enqueued", () =>
      Effect.gen(function*() {
        const schedules = yield* Schedules.Schedules
        const name = freshTopic("h20")
        const topic = freshTopic("h20-ticks")
        // Defined after the ranges below: a backfill ends at or before the schedule's next slot.
        yield* TestClock.setTime(Date.parse("2026-06-01T00:00:00Z"))
        yield* schedules.define({ name, cron: "0 * * * *", topic, overlap: "allow" })
        const backfill = (from: string, to: string) =>
          cliOn(["schedules", "backfill", name, "--from", from, "--to", to])
        const refused = yield* backfill("2026-02-30T00:00:00Z", "2026-03-03T00:00:00Z")
        expect(refused.code).toBe(2)
        expect(refused.stderr).toMatch(
          /^effect-durable: --from expects an ISO-8601 time that exists, with its offset, .*got '2026-02-30T00:00:00Z'$/m
        )
        for (
          const [from, to, flag] of [
            ["2026-01-01T00:00:00Z", "2026-02-29T00:00:00Z", "--to"], // 2026 is no leap year
            ["2026-04-31T00:00:00Z", "2026-05-01T00:00:00Z", "--from"],
            ["2026-04-01T24:00:00Z", "2026-04-02T00:00:00Z", "--from"],
            ["2026-04-01T10:60:00Z", "2026-04-02T00:00:00Z", "--from"],
            ["2026-04-01T00:00:00", "2026-04-02T00:00:00Z", "--from"], // no offset: the machine's time zone
            ["2026-04-01T00:00:00+25:00", "2026-04-02T00:00:00Z", "--from"],
            ["2026-4-1T00:00:00Z", "2026-04-02T00:00:00Z", "--from"]
          ] as const
        ) {
          const result = yield* backfill(from, to)
          expect(result.code, `${from} ${to}`).toBe(2)
          expect(result.stderr, `${from} ${to}`).toContain(`${flag} expects an ISO-8601 time that exists`)
        }
        expect(yield* rowsOf(topic)).toEqual([])
        // A leap day that exists, with an offset: read at its instant (00:00+01:00 is 23:00Z the day before).
        const done = yield* backfill("2024-02-29T00:00:00+01:00", "2024-02-29T02:00:00Z")
        expect([done.code, done.stdout.trim()]).toEqual([
          0,
          `enqueued 3 slots of ${name}; 0 slots of the range already had a message`
        ])
      }))

    it.effect("a watch without a pause and a page that cannot start are refused at their flag: status --interval 0s, dashboard --statement-timeout 1h (exit 2)", () =>
      Effect.gen(function*() {
        for (
          const [args, message] of [
            [["status", "--watch", "--interval", "0s"], "--interval expects a duration from 100 millis to 1 day"],
            [["dashboard", "--statement-timeout", "0s"], "--statement-timeout expects a duration greater than zero"],
            [["dashboard", "--statement-timeout", "1h"], "--statement-timeout expects a duration greater than zero"]
          ] as const
        ) {
          const result = yield* cliOn([...args])
          expect([result.code, result.stdout], args.join(" ")).toEqual([2, ""])
          expect(result.stderr, args.join(" ")).toContain(message)
        }
      }))
  })
})
