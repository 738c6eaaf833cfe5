/**
 * `effect-durable status [--json] [--watch [--interval 2s]]`: per outbox topic and per inbox
 * consumer, what is ready, delayed, claimed, dead and done, and how long the oldest ready
 * message has waited. `--watch` repeats until Ctrl-C (JSON: one line per refresh).
 */
import * as Input from "@effect-durable/core/Input"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import * as Migrations from "@effect-durable/pg/Migrations"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import { duration, json, toggle, within } from "../arguments.js"
import { withDatabase } from "../connection.js"
import * as Output from "../output.js"

/** One reading of the counts, as `--json` prints it. */
export const snapshot = Effect.gen(function*() {
  const outbox = yield* OutboxAdmin.OutboxAdmin
  const inbox = yield* InboxAdmin.InboxAdmin
  const settings = yield* DurableSettings
  const [topics, consumers] = yield* Effect.all([outbox.stats, inbox.stats], { concurrency: 2 })
  const at = new Date(yield* Clock.currentTimeMillis).toISOString()
  return { schema: settings.schema, version: Migrations.latestVersion, at, topics, consumers }
})

type Snapshot = Effect.Success<typeof snapshot>

const render = (s: Snapshot): string => {
  const topics = s.topics.length === 0
    ? "no outbox messages"
    : Output.table<Snapshot["topics"][number]>([
      { header: "TOPIC", value: (t) => t.topic },
      { header: "READY", value: (t) => t.ready },
      { header: "DELAYED", value: (t) => t.delayed },
      { header: "CLAIMED", value: (t) => t.claimed },
      { header: "DEAD", value: (t) => t.dead },
      { header: "CANCELLED", value: (t) => t.cancelled },
      { header: "PROJECTED", value: (t) => t.projected },
      { header: "OLDEST READY", value: (t) => Output.age(t.oldestReadySeconds), align: "right" },
      { header: "", value: (t) => (t.paused ? "paused" : "") }
    ], s.topics)
  const consumers = s.consumers.length === 0
    ? "no inbox receipts"
    : Output.table<Snapshot["consumers"][number]>([
      { header: "CONSUMER", value: (c) => c.consumer },
      { header: "READY", value: (c) => c.ready },
      { header: "DELAYED", value: (c) => c.delayed },
      { header: "CLAIMED", value: (c) => c.claimed },
      { header: "DEAD", value: (c) => c.dead },
      { header: "CANCELLED", value: (c) => c.cancelled },
      { header: "PROCESSED", value: (c) => c.processed },
      { header: "OLDEST READY", value: (c) => Output.age(c.oldestReadySeconds), align: "right" }
    ], s.consumers)
  return `schema ${s.schema} (version ${s.version})\n\nOUTBOX\n${topics}\n\nINBOX\n${consumers}`
}

export const status = Command.make(
  "status",
  {
    json,
    watch: toggle("watch", "Refresh until Ctrl-C"),
    interval: duration("interval").pipe(
      Flag.withDefault("2 seconds"),
      Flag.withDescription("Time between refreshes with --watch, 100ms to 1d (default 2s)"),
      // Zero would query the database in a tight loop.
      within("interval", Input.DurationIn({ min: "100 millis", max: "1 day" }))
    )
  },
  Effect.fn("effect-durable.status")(function*(args) {
    const once = Effect.flatMap(snapshot, (s) => {
      if (args.json) return Output.json(s, { compact: args.watch })
      if (!args.watch) return Output.line(render(s))
      // A terminal is redrawn in place; a pipe gets one block per refresh.
      return process.stdout.isTTY ? Output.redraw(render(s)) : Output.line(`--- ${s.at}\n${render(s)}`)
    })
    const run = args.watch
      ? Effect.repeat(once, Schedule.spaced(Duration.fromInputUnsafe(args.interval))).pipe(Effect.asVoid)
      : once
    yield* withDatabase()(run)
  })
).pipe(Command.withDescription("Counts per outbox topic and inbox consumer; --watch refreshes them"))
