/**
 * `effect-durable purge outbox|inbox|ledger --older-than 7d [--dry-run]`: deletes projected
 * messages, processed receipts or ledger records older than the retention (each with the
 * library's floor), in batches that each commit; progress on stderr. `--dry-run` counts.
 * Ctrl-C stops between batches (a batch is one statement: never half deleted).
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Retention from "@effect-durable/pg/Retention"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Effect from "effect/Effect"
import { duration, json, positive, toggle } from "../arguments.js"
import { withDatabase } from "../connection.js"
import * as Output from "../output.js"

const TARGETS: ReadonlyArray<Retention.Target> = ["outbox", "inbox", "ledger"]

const WHAT: Readonly<Record<Retention.Target, { readonly rows: string; readonly one: string }>> = {
  outbox: { rows: "projected outbox messages", one: "projected outbox message" },
  inbox: { rows: "processed inbox receipts", one: "processed inbox receipt" },
  ledger: { rows: "mutation ledger records", one: "mutation ledger record" }
}

export const purge = Command.make(
  "purge",
  {
    target: Argument.Literals("target", TARGETS).pipe(
      Argument.withMetavar("TARGET"),
      Argument.withDescription("What to purge: outbox, inbox or ledger")
    ),
    olderThan: duration("older-than").pipe(
      Flag.withDescription(
        "Required. Retention: delete what is older (outbox at least 1m, inbox and ledger at least 1h)"
      )
    ),
    batchSize: positive("batch-size", 1000, 10_000, "Rows deleted per committed batch"),
    dryRun: toggle("dry-run", "Count what would be deleted; delete nothing"),
    json
  },
  Effect.fn("effect-durable.purge")(
    function*(args) {
      const settings = yield* DurableSettings
      const what = WHAT[args.target]
      const result = (n: number, key: "wouldDelete" | "deleted") =>
        args.json
          ? Output.json({ schema: settings.schema, target: args.target, olderThan: args.olderThan, [key]: n })
          : Output.line(
            `${key === "deleted" ? "deleted" : "would delete"} ${
              Output.plural(n, what.one, what.rows)
            } older than ${args.olderThan}`
          )
      if (args.dryRun) return yield* result(yield* Retention.purgeable(args.target, args.olderThan), "wouldDelete")
      const options = { olderThan: args.olderThan, batchSize: args.batchSize }
      const run: Effect.Effect<
        number,
        InvalidInput | DatabaseError,
        OutboxAdmin.OutboxAdmin | InboxAdmin.InboxAdmin | MutationLedger.MutationLedger
      > = args.target === "outbox"
        ? Effect.flatMap(OutboxAdmin.OutboxAdmin, (admin) => admin.purge(options))
        : args.target === "inbox"
        ? Effect.flatMap(InboxAdmin.InboxAdmin, (admin) => admin.purge(options))
        : Effect.flatMap(MutationLedger.MutationLedger, (ledger) => ledger.purge(options))
      const deleted = yield* Output.withProgressLogs(`purge ${args.target}`, run).pipe(
        Effect.onInterrupt(() =>
          Output.note(
            `purge ${args.target}: interrupted; the batches already deleted stay deleted, nothing else changed`
          )
        )
      )
      yield* result(deleted, "deleted")
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(
  Command.withDescription(
    "Delete projected outbox messages, processed inbox receipts or ledger records past a retention"
  )
)
