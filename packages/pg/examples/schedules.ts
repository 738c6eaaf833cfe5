// Cron schedules: a nightly report at 03:00 in Berlin and a sweep every 15 minutes, each slot
// one outbox message on its topic, whichever of your processes decides it (every process may
// run the runner: a slot is enqueued once). A projector delivers them like any message; the
// slot travels in the `schedule-slot` header.
import * as Schedules from "@effect-durable/pg/Schedules"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"

/** The runner: defines the schedules at start (create or replace), then decides each slot as it falls due. */
export const runner = Schedules.layerRunner({
  schedules: [
    {
      name: "nightly-report",
      cron: "0 3 * * *",
      timeZone: "Europe/Berlin",
      topic: "reports.nightly",
      payload: { report: "sales" },
      // After downtime, a slot up to 6 hours late still runs; an older one is counted missed.
      catchUp: "6 hours"
    },
    {
      name: "sweep",
      cron: "*/15 * * * *",
      topic: "maintenance.sweep",
      // Never two sweeps queued: a slot is skipped while the last sweep is still open.
      overlap: "skip"
    }
  ]
})

/** Operators pause a schedule, resume it, and fill a range that was missed (each slot without a message, once). */
export const operate = Effect.gen(function*() {
  const schedules = yield* Schedules.Schedules
  yield* schedules.pause("sweep", { by: "ops" })
  yield* schedules.resume("sweep")
  const now = yield* Clock.currentTimeMillis
  return yield* schedules.backfill("nightly-report", { from: new Date(now - 3 * 86_400_000), to: new Date(now) })
})
