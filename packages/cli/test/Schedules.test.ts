// `effect-durable schedules`: list, pause, resume, backfill, run as the built binary on the
// schedules an application defined (the CLI needs none of its code).
import * as Schedules from "@effect-durable/pg/Schedules"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import { cliOn, json, Substrate } from "./support.js"

describe("effect-durable schedules", () => {
  it.layer(Substrate, { timeout: "120 seconds" })((it) => {
    it.effect("list shows each schedule; pause and resume act at once and say whether they applied; backfill fills a range once", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const schedules = yield* Schedules.Schedules
        // Defined after the range the test backfills (slots from a schedule's next one on are the runner's).
        yield* TestClock.setTime(Date.parse("2026-12-04T10:00:00Z"))
        yield* schedules.define({
          name: "nightly-report",
          cron: "0 3 * * *",
          timeZone: "Europe/Berlin",
          topic: "reports"
        })
        yield* schedules.define({ name: "every-10", cron: "*/10 * * * *", topic: "ticks", overlap: "allow" })

        const listed = yield* cliOn(["schedules", "list"])
        expect(listed.code).toBe(0)
        expect(listed.stdout).toMatch(/^nightly-report\s+0 3 \* \* \* \(Europe\/Berlin\)\s+reports\s+\d{4}-/m)
        expect(json(yield* cliOn(["schedules", "list", "--json"])).schedules.map((s: { name: string }) => s.name))
          .toEqual(["every-10", "nightly-report"])

        expect(json(yield* cliOn(["schedules", "pause", "nightly-report", "--json"]))).toEqual({
          schedule: "nightly-report",
          changed: true
        })
        expect((yield* cliOn(["schedules", "pause", "nightly-report"])).stdout).toMatch(/was not running/)
        expect((yield* cliOn(["schedules", "list"])).stdout).toMatch(/^nightly-report\s.*\spaused by /m)
        expect((yield* cliOn(["schedules", "resume", "nightly-report"])).stdout).toMatch(/^resumed schedule/m)

        const range = ["--from", "2026-12-01T00:00:00Z", "--to", "2026-12-01T01:00:00Z"]
        const first = yield* cliOn(["schedules", "backfill", "every-10", ...range])
        expect(first.stdout).toMatch(/^enqueued 6 slots of every-10; 0 slots of the range already had a message/m)
        expect(json(yield* cliOn(["schedules", "backfill", "every-10", ...range, "--json"]))).toEqual({
          schedule: "every-10",
          enqueued: 0,
          present: 6
        })
        const [row] = yield* sql<
          { n: number }
        >`SELECT count(*)::int AS n FROM durable.outbox_messages WHERE topic = 'ticks'`
        expect(row!.n).toBe(6)
      }))

    it.effect("bad times and unknown schedules exit 2 naming the flag or the name, and change nothing", () =>
      Effect.gen(function*() {
        const notIso = yield* cliOn([
          "schedules",
          "backfill",
          "every-10",
          "--from",
          "yesterday",
          "--to",
          "2026-12-01T01:00:00Z"
        ])
        expect(notIso.code).toBe(2)
        expect(notIso.stderr).toMatch(/--from/)
        const backwards = yield* cliOn([
          "schedules",
          "backfill",
          "every-10",
          "--from",
          "2026-12-02T00:00:00Z",
          "--to",
          "2026-12-01T00:00:00Z"
        ])
        expect(backwards.code).toBe(2)
        expect(backwards.stderr).toMatch(/to/)
        const unknown = yield* cliOn([
          "schedules",
          "backfill",
          "nobody",
          "--from",
          "2026-12-01T00:00:00Z",
          "--to",
          "2026-12-01T01:00:00Z"
        ])
        expect(unknown.code).toBe(2)
        expect(unknown.stderr).toMatch(/no schedule nobody/)
      }))
  })
})
