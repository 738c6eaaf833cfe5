/**
 * `effect-durable pause <topic>` / `resume <topic>`: a durable flag every claim honours.
 * Projectors keep running and deliver the other topics; resuming wakes them at once.
 */
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { json } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { operatorName } from "../operator.js"
import * as Output from "../output.js"

const topic = Argument.String("topic").pipe(Argument.withMetavar("TOPIC"), Argument.withDescription("The outbox topic"))

export const pause = Command.make(
  "pause",
  {
    topic,
    by: Flag.String("by").pipe(
      Flag.withMetavar("NAME"),
      Flag.optional,
      Flag.withDescription("Who pauses it (default: your user name)")
    ),
    json
  },
  Effect.fn("effect-durable.pause")(
    function*(args) {
      const admin = yield* OutboxAdmin.OutboxAdmin
      const by = Option.getOrElse(args.by, operatorName)
      const changed = yield* admin.pause(args.topic, { by })
      yield* Effect.logInfo(`operator action: pause topic ${args.topic} by ${by}`)
      if (args.json) return yield* Output.json({ topic: args.topic, paused: true, changed })
      const shown = Output.printable(args.topic)
      yield* Output.line(
        changed ? `paused topic ${shown}: claims skip it until it is resumed` : `topic ${shown} was already paused`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Pause a topic: projectors deliver the others and skip it until it is resumed"))

export const resume = Command.make(
  "resume",
  { topic, json },
  Effect.fn("effect-durable.resume")(
    function*(args) {
      const admin = yield* OutboxAdmin.OutboxAdmin
      const changed = yield* admin.resume(args.topic)
      yield* Effect.logInfo(`operator action: resume topic ${args.topic} by ${operatorName()}`)
      if (args.json) return yield* Output.json({ topic: args.topic, paused: false, changed })
      const shown = Output.printable(args.topic)
      yield* Output.line(changed ? `resumed topic ${shown}: projectors were woken` : `topic ${shown} was not paused`)
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Resume a paused topic and wake the projectors"))
