/**
 * `effect-durable feeds list|reset|remove`: the feed's consumers (`Feed`), without the
 * application. `list` shows how far behind each is and what holds the horizon back; `reset`
 * moves a consumer's cursor (a rebuild from the beginning), after any batch under way commits.
 */
import { FeedConsumerMissing } from "@effect-durable/core/Errors"
import * as Feed from "@effect-durable/pg/Feed"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Effect from "effect/Effect"
import { INSTANT_RULE, json, parseInstant } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { describeHolder } from "../diagnostics.js"
import { checkFailed, invalidValue, usage } from "../errors.js"
import { operatorName } from "../operator.js"
import * as Output from "../output.js"

const name = Argument.String("name").pipe(
  Argument.withMetavar("CONSUMER"),
  Argument.withDescription("The feed consumer's name")
)

const missing = (error: FeedConsumerMissing) => checkFailed(error.message)

const list = Command.make(
  "list",
  { json },
  Effect.fn("effect-durable.feeds.list")(
    function*(args) {
      const feed = yield* Feed.Feed
      const consumers = yield* feed.lag()
      const holder = yield* feed.holder
      if (args.json) return yield* Output.json({ consumers, holder })
      yield* Output.line(
        consumers.length === 0 ? "no feed consumers" : Output.table<typeof consumers[number]>([
          { header: "CONSUMER", value: (c) => c.name },
          { header: "TOPICS", value: (c) => c.topics.join(", ") },
          { header: "READ", value: (c) => c.read },
          { header: "READABLE", value: (c) => c.readable >= Feed.LAG_CAP ? `${Feed.LAG_CAP}+` : c.readable },
          { header: "HELD", value: (c) => c.held >= Feed.LAG_CAP ? `${Feed.LAG_CAP}+` : c.held },
          { header: "LAST READ", value: (c) => c.readAt ?? "never" }
        ], consumers)
      )
      yield* Output.line(
        holder === null
          ? "horizon: no transaction holds it back"
          : `horizon held by ${describeHolder(holder)}: messages committed after it began wait for it to end`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("List the feed consumers: read, readable now, held by the horizon, and what holds it"))

const from = Flag.String("from").pipe(
  Flag.withMetavar("WHERE"),
  Flag.withDescription(`Required. beginning, now, or a time (${INSTANT_RULE}): messages created since then`),
  Flag.mapEffect((text): Effect.Effect<Feed.StartAt, ReturnType<typeof invalidValue>> => {
    if (text === "beginning" || text === "now") return Effect.succeed(text)
    const at = parseInstant(text)
    return at === undefined
      ? Effect.fail(invalidValue(`--from expects beginning, now or ${INSTANT_RULE}, got '${Output.printable(text)}'`))
      : Effect.succeed(at)
  })
)

const reset = Command.make(
  "reset",
  { name, from, json },
  Effect.fn("effect-durable.feeds.reset")(
    function*(args) {
      const consumer = yield* (yield* Feed.Feed).reset(args.name, args.from).pipe(
        Effect.catchTag("FeedConsumerMissing", (error) => Effect.fail(missing(error)))
      )
      const where = args.from instanceof Date ? args.from.toISOString() : args.from
      yield* Effect.logInfo(`operator action: reset feed consumer ${args.name} to ${where} by ${operatorName()}`)
      if (args.json) return yield* Output.json({ consumer })
      yield* Output.line(
        `feed consumer ${Output.printable(args.name)} reads from ${where} on: ${
          Output.plural(consumer.readable, "message")
        } to read now`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Move a feed consumer's cursor: to the beginning (a rebuild), to now, or to a time"))

const remove = Command.make(
  "remove",
  { name, json },
  Effect.fn("effect-durable.feeds.remove")(
    function*(args) {
      const removed = yield* (yield* Feed.Feed).remove(args.name)
      yield* Effect.logInfo(`operator action: remove feed consumer ${args.name} by ${operatorName()}`)
      if (args.json) return yield* Output.json({ consumer: args.name, removed })
      if (!removed) return yield* checkFailed(`no feed consumer ${JSON.stringify(args.name)}`)
      yield* Output.line(`removed feed consumer ${Output.printable(args.name)}`)
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Remove a feed consumer and its cursor"))

export const feeds = Command.make(
  "feeds",
  {},
  () => usage("feeds: name a subcommand: list, reset, remove")
).pipe(
  Command.withDescription("List, reset and remove the feed's consumers"),
  Command.withSubcommands([list, reset, remove])
)
