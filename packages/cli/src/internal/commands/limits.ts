/**
 * `effect-durable limits list|set|group|clear`: the flow limits of `FlowControl` — a topic's
 * most messages in flight across every projector, its most per group, a group's own limit and
 * weight — changed at run time: every claim reads them, no process restarts.
 */
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { json } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { usage } from "../errors.js"
import * as Output from "../output.js"
import { operatorName } from "./topics.js"

const topic = Argument.String("topic").pipe(Argument.withMetavar("TOPIC"), Argument.withDescription("The topic"))
const group = Argument.String("group").pipe(Argument.withMetavar("GROUP"), Argument.withDescription("The group"))
const count = (name: string, description: string) =>
  Flag.Int(name).pipe(Flag.withMetavar("N"), Flag.optional, Flag.withDescription(description))
const orNone = (n: number | null) => (n === null ? "-" : String(n))

const list = Command.make(
  "list",
  { json },
  Effect.fn("effect-durable.limits.list")(
    function*(args) {
      const limits = yield* (yield* FlowControl.FlowControl).limits
      if (args.json) return yield* Output.json({ limits })
      yield* Output.line(
        limits.length === 0 ? "no limits" : Output.table<typeof limits[number]>([
          { header: "TOPIC", value: (l) => l.topic },
          { header: "IN FLIGHT", value: (l) => l.inFlight },
          { header: "MAX", value: (l) => orNone(l.maxInFlight) },
          { header: "PER GROUP", value: (l) => orNone(l.groupMaxInFlight) },
          {
            header: "GROUPS",
            value: (l) =>
              l.groups.map((g) => `${g.group}: ${g.maxInFlight ?? "per group"}, weight ${g.weight}`).join("; ") || "-"
          },
          { header: "SET BY", value: (l) => `${l.updatedBy} at ${l.updatedAt}` }
        ], limits)
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("List the limited topics: what is in flight, their limits, their groups"))

const set = Command.make(
  "set",
  {
    topic,
    max: count("max", "At most N of the topic's messages in flight (none when left out)"),
    groupMax: count("group-max", "At most N of one group's messages in flight (none when left out)"),
    json
  },
  Effect.fn("effect-durable.limits.set")(
    function*(args) {
      const by = operatorName()
      const maxInFlight = Option.getOrNull(args.max)
      const groupMaxInFlight = Option.getOrNull(args.groupMax)
      if (maxInFlight === null && groupMaxInFlight === null) {
        return yield* usage("limits set: give --max, --group-max or both (`limits clear` removes a topic's limits)")
      }
      yield* (yield* FlowControl.FlowControl).setLimit(args.topic, {
        maxInFlight,
        groupMaxInFlight,
        by: by.slice(0, 128)
      })
      yield* Effect.logInfo(
        `operator action: limits of topic ${args.topic} set to max ${orNone(maxInFlight)}, per group ${
          orNone(groupMaxInFlight)
        } by ${by}`
      )
      if (args.json) return yield* Output.json({ topic: args.topic, maxInFlight, groupMaxInFlight })
      yield* Output.line(
        `topic ${Output.printable(args.topic)}: at most ${orNone(maxInFlight)} in flight, ${
          orNone(groupMaxInFlight)
        } per group`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Set (replace) a topic's limits: in flight across every projector, and per group"))

const setGroup = Command.make(
  "group",
  {
    topic,
    group,
    max: count("max", "At most N of this group's messages in flight (the topic's per-group limit when left out)"),
    weight: count("weight", "Its share against the topic's other groups (1 to 1000; default 1)"),
    json
  },
  Effect.fn("effect-durable.limits.group")(
    function*(args) {
      const by = operatorName()
      const maxInFlight = Option.getOrNull(args.max)
      const weight = Option.getOrElse(args.weight, () => 1)
      yield* (yield* FlowControl.FlowControl).setGroup(args.topic, args.group, {
        maxInFlight,
        weight,
        by: by.slice(0, 128)
      })
      yield* Effect.logInfo(
        `operator action: group ${args.group} of topic ${args.topic} set to max ${
          orNone(maxInFlight)
        }, weight ${weight} by ${by}`
      )
      if (args.json) return yield* Output.json({ topic: args.topic, group: args.group, maxInFlight, weight })
      yield* Output.line(
        `group ${Output.printable(args.group)} of ${Output.printable(args.topic)}: at most ${
          maxInFlight ?? "the topic's per-group limit"
        } in flight, weight ${weight}`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Give one group of a topic its own limit and weight (a tier)"))

const clear = Command.make(
  "clear",
  { topic, json },
  Effect.fn("effect-durable.limits.clear")(
    function*(args) {
      const cleared = yield* (yield* FlowControl.FlowControl).clear(args.topic)
      yield* Effect.logInfo(`operator action: limits of topic ${args.topic} cleared by ${operatorName()}`)
      if (args.json) return yield* Output.json({ topic: args.topic, cleared })
      yield* Output.line(
        cleared
          ? `topic ${Output.printable(args.topic)} has no limits now`
          : `topic ${Output.printable(args.topic)} had no limits`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Remove every limit of a topic and its groups' settings"))

export const limits = Command.make(
  "limits",
  {},
  () => usage("limits: name a subcommand: list, set, group, clear")
).pipe(
  Command.withDescription("Global concurrency limits and fair share per topic: list, set, group, clear"),
  Command.withSubcommands([list, set, setGroup, clear])
)
