/**
 * `effect-durable ledger show <subject> <operation> <key> [--json]`: the mutation ledger's
 * record of one idempotency key: status, kind, when it was recorded, the request fingerprint
 * and eligibility claim a retry must match (any difference is a conflict), and the stored
 * response. Exit 1 when there is no record.
 */
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { json } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { checkFailed, usage } from "../errors.js"
import * as Output from "../output.js"

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex")

/** A record as JSON can carry it: bytes as hex, the body as text when it is UTF-8. */
export const recordJson = (identity: MutationLedger.MutationIdentity, record: MutationLedger.StoredMutation) => ({
  ...identity,
  kind: record.kind,
  status: record.status,
  recordedAt: record.recordedAt,
  fingerprint: hex(record.fingerprint),
  eligibility: hex(record.eligibility),
  response: record.response,
  meta: record.meta,
  bodyBytes: record.body.length
})

const show = Command.make(
  "show",
  {
    subject: Argument.String("subject").pipe(
      Argument.withMetavar("SUBJECT"),
      Argument.withDescription("The ledger's subject (the tenant or resource)")
    ),
    operation: Argument.String("operation").pipe(
      Argument.withMetavar("OPERATION"),
      Argument.withDescription("The operation's name")
    ),
    key: Argument.String("key").pipe(Argument.withMetavar("KEY"), Argument.withDescription("The idempotency key")),
    json
  },
  Effect.fn("effect-durable.ledger.show")(
    function*(args) {
      const ledger = yield* MutationLedger.MutationLedger
      const identity = { subject: args.subject, operation: args.operation, key: args.key }
      const found = yield* ledger.lookup(identity)
      if (Option.isNone(found)) {
        return yield* checkFailed(`no ledger record for ${args.subject} / ${args.operation} / ${args.key}`)
      }
      const r = recordJson(identity, found.value)
      if (args.json) return yield* Output.json(r)
      const field = (name: string, value: string | number) =>
        `${`${name}:`.padEnd(14)}${Output.printable(String(value))}`
      yield* Output.line([
        field("identity", `${r.subject} / ${r.operation} / ${r.key}`),
        field("status", `${r.status} (effect ${r.status === "accepted" ? "applied" : "not applied"})`),
        field("kind", r.kind),
        field("recorded", r.recordedAt),
        field("fingerprint", r.fingerprint),
        field("eligibility", r.eligibility === "" ? "(empty)" : r.eligibility),
        field(
          "response",
          r.response === null && r.bodyBytes > 0 ? `${r.bodyBytes} bytes` : Output.stringify(r.response)
        ),
        ...(r.meta === null ? [] : [field("meta", Output.stringify(r.meta))]),
        "A retry with another kind, eligibility or fingerprint is a conflict; an exact one replays the response."
      ].join("\n"))
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Show the ledger's record of an idempotency key"))

export const ledger = Command.make("ledger", {}, () => usage("ledger: name a subcommand: show")).pipe(
  Command.withDescription("Look up the mutation ledger"),
  Command.withSubcommands([show])
)
