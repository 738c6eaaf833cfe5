/**
 * `effect-durable retry-now --id ...` and `move-aside --id ... --reason ...`: the two actions
 * on a message still to be delivered. Retry now hurries a message waiting out a retry's
 * backoff or an enqueue's delay (its attempts kept); move aside sends a message that blocks
 * its ordering key to the dead letters with a reason, so the key's later messages flow
 * (`dead-letters redrive` brings it back). `cancel` calls messages off, waiting or being
 * delivered (a projector delivering one stops at once); `restore` brings cancelled ones back.
 * `--inbox` acts on the stored inbox instead. Ids that were not in a state the action applies
 * to are named, and the exit code is 1.
 */
import * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Effect from "effect/Effect"
import { confirm, ids, json, toggle, yes } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { checkFailed, usage } from "../errors.js"
import { operatorName } from "../operator.js"
import * as Output from "../output.js"

const inbox = toggle(
  "inbox",
  "The ids are the stored inbox's entries (as dead-letters list --consumer shows them), not the outbox's"
)

/** The ids acted on, the ones left (not in a state the action applies to), said and exit 1 when any. */
const report = Effect.fnUntraced(function*(
  verb: string,
  asked: ReadonlyArray<string>,
  acted: ReadonlyArray<string>,
  notApplicable: string,
  asJson: boolean
) {
  const done = new Set(acted)
  const left = asked.filter((id) => !done.has(id))
  if (asJson) yield* Output.json({ [verb]: [...done], left })
  else if (done.size > 0) yield* Output.line(`${verb}: ${[...done].join(", ")}`)
  if (left.length > 0) return yield* checkFailed(`left as they are (${notApplicable}): ${left.join(", ")}`)
})

const requireIds = (command: string, given: ReadonlyArray<string>) =>
  given.length === 0 ? usage(`${command}: name the messages with --id (repeat it for several)`) : Effect.void

export const retryNow = Command.make(
  "retry-now",
  { ids, inbox, json },
  Effect.fn("effect-durable.retry-now")(
    function*(args) {
      yield* requireIds("retry-now", args.ids)
      const acted = args.inbox
        ? yield* (yield* InboxAdmin.InboxAdmin).retryNow(args.ids)
        : yield* (yield* OutboxAdmin.OutboxAdmin).retryNow(args.ids)
      yield* Effect.logInfo(`operator action: retry now ${args.ids.join(", ")} by ${operatorName()}`)
      yield* report("retried now", args.ids, acted, "not waiting for a retry or a delay", args.json)
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription(
  "Deliver messages waiting for a retry or a delay now, their attempts kept: --id ... (--inbox for the inbox's)"
))

export const moveAside = Command.make(
  "move-aside",
  {
    ids,
    reason: Flag.String("reason").pipe(
      Flag.withMetavar("TEXT"),
      Flag.withDescription("Why, recorded in the message's last error (required)")
    ),
    inbox,
    yes,
    json
  },
  Effect.fn("effect-durable.move-aside")(
    function*(args) {
      yield* requireIds("move-aside", args.ids)
      yield* confirm(
        args.yes,
        `move ${Output.plural(args.ids.length, "message")} aside to the dead letters (${Output.clip(args.reason, 60)})?`
      )
      const acted = args.inbox
        ? yield* (yield* InboxAdmin.InboxAdmin).moveAside(args.ids, { reason: args.reason, by: operatorName() })
        : yield* (yield* OutboxAdmin.OutboxAdmin).moveAside(args.ids, { reason: args.reason, by: operatorName() })
      yield* Effect.logInfo(`operator action: move aside ${args.ids.join(", ")} by ${operatorName()}`)
      yield* report("moved aside", args.ids, acted, "not ready or delayed: claimed, dead, done or unknown", args.json)
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription(
  "Send messages that block their ordering key to the dead letters with a reason, so the key moves on: --id ... --reason ... (asks first unless --yes)"
))

export const cancel = Command.make(
  "cancel",
  {
    ids,
    reason: Flag.String("reason").pipe(
      Flag.withMetavar("TEXT"),
      Flag.optional,
      Flag.withDescription("Why, recorded in the message's last error")
    ),
    inbox,
    yes,
    json
  },
  Effect.fn("effect-durable.cancel")(
    function*(args) {
      yield* requireIds("cancel", args.ids)
      yield* confirm(args.yes, `cancel ${Output.plural(args.ids.length, "message")}? They will not be delivered.`)
      const options = { by: operatorName(), ...(args.reason._tag === "Some" ? { reason: args.reason.value } : {}) }
      const done = args.inbox
        ? yield* (yield* InboxAdmin.InboxAdmin).cancel(args.ids, options)
        : yield* (yield* OutboxAdmin.OutboxAdmin).cancel(args.ids, options)
      yield* Effect.logInfo(`operator action: cancel ${args.ids.join(", ")} by ${operatorName()}`)
      if (done.interrupted.length > 0 && !args.json) {
        yield* Output.line(
          `being delivered when cancelled (their deliveries are stopped): ${done.interrupted.join(", ")}`
        )
      }
      yield* report(
        "cancelled",
        args.ids,
        done.cancelled,
        "not waiting or being delivered: done, dead, cancelled or unknown",
        args.json
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription(
  "Cancel messages waiting or being delivered, so they are never delivered (a delivery under way is stopped): --id ... [--reason ...] (asks first unless --yes)"
))

export const restore = Command.make(
  "restore",
  { ids, inbox, json },
  Effect.fn("effect-durable.restore")(
    function*(args) {
      yield* requireIds("restore", args.ids)
      const acted = args.inbox
        ? yield* (yield* InboxAdmin.InboxAdmin).restore(args.ids)
        : yield* (yield* OutboxAdmin.OutboxAdmin).restore(args.ids)
      yield* Effect.logInfo(`operator action: restore ${args.ids.join(", ")} by ${operatorName()}`)
      yield* report("restored", args.ids, acted, "not cancelled, or a dedup key an open message holds", args.json)
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Make cancelled messages deliverable again with fresh attempts: --id ..."))
