/**
 * `effect-durable schedules list|pause|resume|backfill`: the cron schedules of `Schedules`,
 * without the application. Pause and resume act at once (every runner reads the flag at its
 * next decision); a backfill enqueues each slot of a range that has no message yet.
 */
import * as Schedules from "@effect-durable/pg/Schedules"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Effect from "effect/Effect"
import { instant, json } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { usage } from "../errors.js"
import { operatorName } from "../operator.js"
import * as Output from "../output.js"

const name = Argument.String("name").pipe(
  Argument.withMetavar("SCHEDULE"),
  Argument.withDescription("The schedule's name")
)

const list = Command.make(
  "list",
  { json },
  Effect.fn("effect-durable.schedules.list")(
    function*(args) {
      const schedules = yield* (yield* Schedules.Schedules).list
      if (args.json) return yield* Output.json({ schedules })
      yield* Output.line(
        schedules.length === 0 ? "no schedules" : Output.table<typeof schedules[number]>([
          { header: "SCHEDULE", value: (s) => s.name },
          { header: "CRON", value: (s) => `${s.cron} (${s.timeZone})` },
          { header: "TOPIC", value: (s) => s.topic },
          {
            header: "NEXT SLOT",
            value: (s) => (s.paused ? `paused${s.pausedBy === null ? "" : ` by ${s.pausedBy}`}` : s.nextSlot)
          },
          { header: "OVERLAP", value: (s) => s.overlap },
          { header: "ENQUEUED", value: (s) => s.enqueued },
          { header: "SKIPPED", value: (s) => s.skipped },
          { header: "MISSED", value: (s) => s.missed },
          { header: "BACKFILLED", value: (s) => s.backfilled }
        ], schedules)
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("List the schedules: cron, next slot, and their slots by outcome"))

/** pause and resume: by name, logged as an operator action, reported whether it applied. */
const toggle = (verb: "pause" | "resume", description: string) =>
  Command.make(
    verb,
    { name, json },
    Effect.fn(`effect-durable.schedules.${verb}`)(
      function*(args) {
        const schedules = yield* Schedules.Schedules
        const by = operatorName()
        const changed = verb === "pause"
          ? yield* schedules.pause(args.name, { by })
          : yield* schedules.resume(args.name)
        yield* Effect.logInfo(`operator action: ${verb} schedule ${args.name} by ${by}`)
        if (args.json) return yield* Output.json({ schedule: args.name, changed })
        yield* Output.line(
          changed
            ? `${verb === "pause" ? "paused" : "resumed"} schedule ${Output.printable(args.name)}`
            : `schedule ${Output.printable(args.name)} was ${
              verb === "pause" ? "not running" : "not paused"
            } (or does not exist)`
        )
      },
      withDatabase({ poolSize: 1 })
    )
  ).pipe(Command.withDescription(description))

const backfill = Command.make(
  "backfill",
  {
    name,
    from: instant("from", "Required. The range's start (included): ISO-8601 such as 2026-12-01T00:00:00Z"),
    to: instant("to", "Required. Its end (excluded): ISO-8601 such as 2026-12-01T00:00:00Z"),
    json
  },
  Effect.fn("effect-durable.schedules.backfill")(
    function*(args) {
      const done = yield* (yield* Schedules.Schedules).backfill(args.name, { from: args.from, to: args.to })
      yield* Effect.logInfo(
        `operator action: backfill schedule ${args.name} from ${args.from.toISOString()} to ${args.to.toISOString()} by ${operatorName()} (${done.enqueued} enqueued)`
      )
      if (args.json) return yield* Output.json({ schedule: args.name, ...done })
      yield* Output.line(
        `enqueued ${Output.plural(done.enqueued, "slot")} of ${Output.printable(args.name)}; ${
          Output.plural(done.present, "slot")
        } of the range already had a message`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Enqueue each slot of a range that has no message yet"))

export const schedules = Command.make(
  "schedules",
  {},
  () => usage("schedules: name a subcommand: list, pause, resume, backfill")
).pipe(
  Command.withDescription("List, pause, resume and backfill cron schedules"),
  Command.withSubcommands([
    list,
    toggle("pause", "Pause a schedule: its slots are missed until it is resumed"),
    toggle("resume", "Resume a paused schedule at its next slot"),
    backfill
  ])
)
