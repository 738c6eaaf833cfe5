/**
 * `effect-durable limits list|set|group|clear|inbox`: the flow limits of `FlowControl` — a
 * topic's most messages in flight across every projector, its most per group, a group's own
 * limit and weight, and rates (`--rate 10/1m`: a token bucket per topic, `--group-rate` per
 * group); `limits inbox set|clear` the same for a stored-inbox consumer (in flight and a rate) —
 * changed at run time: every claim reads them, no process restarts.
 */
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { json } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { formatPeriod } from "../durations.js"
import { usage } from "../errors.js"
import * as LimitInput from "../limitInput.js"
import { operatorName } from "../operator.js"
import * as Output from "../output.js"

const topic = Argument.String("topic").pipe(Argument.withMetavar("TOPIC"), Argument.withDescription("The topic"))
const consumer = Argument.String("consumer").pipe(
  Argument.withMetavar("CONSUMER"),
  Argument.withDescription("The stored inbox's consumer")
)
const group = Argument.String("group").pipe(Argument.withMetavar("GROUP"), Argument.withDescription("The group"))
const count = (name: string, description: string) =>
  Flag.Int(name).pipe(Flag.withMetavar("N"), Flag.optional, Flag.withDescription(description))
const orNone = (n: number | null) => (n === null ? "-" : String(n))
const rateFlag = (name: string, description: string) =>
  Flag.String(name).pipe(Flag.withMetavar("N/PERIOD"), Flag.optional, Flag.withDescription(description))

/** The flags as the shared rules name them (the page names its form's fields). */
const FLAGS: LimitInput.FieldNames = {
  maxInFlight: "--max",
  groupMaxInFlight: "--group-max",
  rate: "--rate",
  burst: "--burst",
  groupRate: "--group-rate",
  groupBurst: "--group-burst",
  options: "limits",
  clear: "`limits clear`"
}
const INBOX_FLAGS: LimitInput.FieldNames = { ...FLAGS, clear: "`limits inbox clear`" }

const showRate = (rate: FlowControl.RateLimit | null) =>
  rate === null ? "-" : `${rate.limit}/${formatPeriod(rate.perMillis)} (burst ${rate.burst})`

const list = Command.make(
  "list",
  { json },
  Effect.fn("effect-durable.limits.list")(
    function*(args) {
      const flow = yield* FlowControl.FlowControl
      const limits = yield* flow.limits
      const inbox = yield* flow.inboxLimits
      if (args.json) return yield* Output.json({ limits, inbox })
      if (inbox.length > 0) {
        yield* Output.line(Output.table<typeof inbox[number]>([
          { header: "INBOX CONSUMER", value: (l) => l.consumer },
          { header: "IN FLIGHT", value: (l) => l.inFlight },
          { header: "MAX", value: (l) => orNone(l.maxInFlight) },
          { header: "RATE", value: (l) => showRate(l.rate) },
          { header: "TOKENS", value: (l) => (l.tokens === null ? "-" : Math.floor(l.tokens)) },
          { header: "SET BY", value: (l) => `${l.updatedBy} at ${l.updatedAt}` }
        ], inbox))
        if (limits.length === 0) return
      }
      yield* Output.line(
        limits.length === 0 ? "no limits" : Output.table<typeof limits[number]>([
          { header: "TOPIC", value: (l) => l.topic },
          { header: "IN FLIGHT", value: (l) => l.inFlight },
          { header: "MAX", value: (l) => orNone(l.maxInFlight) },
          { header: "PER GROUP", value: (l) => orNone(l.groupMaxInFlight) },
          { header: "RATE", value: (l) => showRate(l.rate) },
          { header: "TOKENS", value: (l) => (l.tokens === null ? "-" : Math.floor(l.tokens)) },
          { header: "GROUP RATE", value: (l) => showRate(l.groupRate) },
          {
            header: "GROUPS",
            value: (l) =>
              l.groups.map((g) =>
                `${g.group}: ${g.maxInFlight ?? "per group"}, weight ${g.weight}${
                  g.rate === null ? "" : `, rate ${showRate(g.rate)}`
                }`
              ).join("; ") || "-"
          },
          { header: "SET BY", value: (l) => `${l.updatedBy} at ${l.updatedAt}` }
        ], limits)
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(
  Command.withDescription(
    "List the limited topics (what is in flight, their limits, their groups) and the limited inbox consumers"
  )
)

const set = Command.make(
  "set",
  {
    topic,
    max: count("max", "At most N of the topic's messages in flight (none when left out)"),
    groupMax: count("group-max", "At most N of one group's messages in flight (none when left out)"),
    rate: rateFlag("rate", "At most N of the topic's messages claimed per PERIOD, e.g. 10/1m (none when left out)"),
    burst: count("burst", "The most of them claimed at once after a quiet spell (default: N of --rate)"),
    groupRate: rateFlag("group-rate", "At most N of one group's messages claimed per PERIOD (none when left out)"),
    groupBurst: count("group-burst", "A group's most claimed at once (default: N of --group-rate)"),
    json
  },
  Effect.fn("effect-durable.limits.set")(
    function*(args) {
      const by = operatorName()
      const { groupMaxInFlight, groupRate, maxInFlight, rate } = yield* LimitInput.topicLimits({
        maxInFlight: Option.getOrNull(args.max),
        groupMaxInFlight: Option.getOrNull(args.groupMax),
        rate: Option.getOrNull(args.rate),
        burst: Option.getOrNull(args.burst),
        groupRate: Option.getOrNull(args.groupRate),
        groupBurst: Option.getOrNull(args.groupBurst)
      }, FLAGS)
      const flow = yield* FlowControl.FlowControl
      yield* flow.setLimit(args.topic, { maxInFlight, groupMaxInFlight, rate, groupRate, by })
      const set = (yield* flow.limits).find((l) => l.topic === args.topic)
      const said = `at most ${orNone(maxInFlight)} in flight, ${orNone(groupMaxInFlight)} per group, rate ${
        showRate(set?.rate ?? null)
      }, per-group rate ${showRate(set?.groupRate ?? null)}`
      yield* Effect.logInfo(`operator action: limits of topic ${args.topic} set to ${said} by ${by}`)
      if (args.json) {
        return yield* Output.json({
          topic: args.topic,
          maxInFlight,
          groupMaxInFlight,
          rate: set?.rate ?? null,
          groupRate: set?.groupRate ?? null
        })
      }
      yield* Output.line(`topic ${Output.printable(args.topic)}: ${said}`)
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(
  Command.withDescription(
    "Set (replace) a topic's limits: in flight across every projector and per group, rates per topic and per group"
  )
)

const setGroup = Command.make(
  "group",
  {
    topic,
    group,
    max: count("max", "At most N of this group's messages in flight (the topic's per-group limit when left out)"),
    weight: count("weight", "Its share against the topic's other groups (1 to 1000; default 1)"),
    rate: rateFlag(
      "rate",
      "At most N of this group's messages claimed per PERIOD (the topic's per-group rate when left out)"
    ),
    burst: count("burst", "The most of them claimed at once (default: N of --rate)"),
    json
  },
  Effect.fn("effect-durable.limits.group")(
    function*(args) {
      const by = operatorName()
      const maxInFlight = Option.getOrNull(args.max)
      const weight = Option.getOrElse(args.weight, () => 1)
      const rate = yield* LimitInput.rateOf(FLAGS, Option.getOrNull(args.rate), Option.getOrNull(args.burst))
      const flow = yield* FlowControl.FlowControl
      yield* flow.setGroup(args.topic, args.group, { maxInFlight, weight, rate, by })
      const set = (yield* flow.limits).find((l) => l.topic === args.topic)?.groups.find((g) => g.group === args.group)
      const said = `max ${orNone(maxInFlight)}, weight ${weight}, rate ${
        set?.rate ? showRate(set.rate) : "the topic's per-group rate"
      }`
      yield* Effect.logInfo(`operator action: group ${args.group} of topic ${args.topic} set to ${said} by ${by}`)
      if (args.json) {
        return yield* Output.json({
          topic: args.topic,
          group: args.group,
          maxInFlight,
          weight,
          rate: set?.rate ?? null
        })
      }
      yield* Output.line(
        `group ${Output.printable(args.group)} of ${Output.printable(args.topic)}: at most ${
          maxInFlight ?? "the topic's per-group limit"
        } in flight, weight ${weight}, rate ${set?.rate ? showRate(set.rate) : "the topic's per-group rate"}`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(
  Command.withDescription(
    "Give one group of a topic its own limit, weight and rate (a tier); a limit or rate left out is the topic's per-group one"
  )
)

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

const inboxSet = Command.make(
  "set",
  {
    consumer,
    max: count("max", "At most N of the consumer's entries in flight across every worker (none when left out)"),
    rate: rateFlag("rate", "At most N of its entries claimed per PERIOD, e.g. 10/1m (none when left out)"),
    burst: count("burst", "The most of them claimed at once after a quiet spell (default: N of --rate)"),
    json
  },
  Effect.fn("effect-durable.limits.inbox.set")(
    function*(args) {
      const by = operatorName()
      const { maxInFlight, rate } = yield* LimitInput.inboxLimits({
        maxInFlight: Option.getOrNull(args.max),
        rate: Option.getOrNull(args.rate),
        burst: Option.getOrNull(args.burst)
      }, INBOX_FLAGS)
      const flow = yield* FlowControl.FlowControl
      yield* flow.setInboxLimit(args.consumer, { maxInFlight, rate, by })
      const set = (yield* flow.inboxLimits).find((l) => l.consumer === args.consumer)
      const said = `at most ${orNone(maxInFlight)} in flight, rate ${showRate(set?.rate ?? null)}`
      yield* Effect.logInfo(`operator action: limits of inbox consumer ${args.consumer} set to ${said} by ${by}`)
      if (args.json) return yield* Output.json({ consumer: args.consumer, maxInFlight, rate: set?.rate ?? null })
      yield* Output.line(`inbox consumer ${Output.printable(args.consumer)}: ${said}`)
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Set (replace) a stored-inbox consumer's limits: in flight across every worker, a rate"))

const inboxClear = Command.make(
  "clear",
  { consumer, json },
  Effect.fn("effect-durable.limits.inbox.clear")(
    function*(args) {
      const cleared = yield* (yield* FlowControl.FlowControl).clearInbox(args.consumer)
      yield* Effect.logInfo(`operator action: limits of inbox consumer ${args.consumer} cleared by ${operatorName()}`)
      if (args.json) return yield* Output.json({ consumer: args.consumer, cleared })
      yield* Output.line(
        `inbox consumer ${Output.printable(args.consumer)} ${cleared ? "has no limits now" : "had no limits"}`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Remove a stored-inbox consumer's limits"))

const inbox = Command.make(
  "inbox",
  {},
  () => usage("limits inbox: name a subcommand: set, clear")
).pipe(
  Command.withDescription("Limits of a stored-inbox consumer (InboxWorker): set, clear"),
  Command.withSubcommands([inboxSet, inboxClear])
)

export const limits = Command.make(
  "limits",
  {},
  () => usage("limits: name a subcommand: list, set, group, clear, inbox")
).pipe(
  Command.withDescription(
    "Global concurrency limits, rates and fair share per topic, and limits per inbox consumer: list, set, group, clear, inbox"
  ),
  Command.withSubcommands([list, set, setGroup, clear, inbox])
)
