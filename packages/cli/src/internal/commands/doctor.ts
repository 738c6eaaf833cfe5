/**
 * `effect-durable doctor [--json] [--strict]`: schema version and drift, LISTEN/NOTIFY,
 * pooler mode, dead tuples of the substrate's tables, the oldest snapshot holding back
 * vacuum, the oldest writing transaction holding back the feeds. Exit 1 when a check fails (with `--strict`, also on a warning).
 */
import * as Command from "effect/cli/Command"
import * as Effect from "effect/Effect"
import { json, toggle } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { runChecks } from "../diagnostics.js"
import { checkFailed } from "../errors.js"
import * as Output from "../output.js"

const MARK = { ok: "ok  ", warn: "WARN", fail: "FAIL" } as const

export const doctor = Command.make(
  "doctor",
  { json, strict: toggle("strict", "Exit 1 on warnings too") },
  Effect.fn("effect-durable.doctor")(
    function*(args) {
      const checks = yield* runChecks
      if (args.json) yield* Output.json({ checks })
      else yield* Output.line(checks.map((c) => `${MARK[c.status]}  ${c.name}: ${c.detail}`).join("\n"))
      const failed = checks.filter((c) => c.status === "fail" || (args.strict && c.status === "warn"))
      if (failed.length > 0) return yield* checkFailed(`doctor: ${failed.map((c) => c.name).join(", ")}`)
    },
    withDatabase({ anyVersion: true, poolSize: 3 })
  )
).pipe(
  Command.withDescription("Check the schema, LISTEN/NOTIFY, the pooler, table bloat, vacuum's horizon and the feeds'")
)
