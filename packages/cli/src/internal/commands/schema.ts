/**
 * The schema's lifecycle: `migrate [--dry-run]` (apply, or list, the pending versions),
 * `verify` (drift from what the migrations build; exit 1 on drift) and `grant <role>`
 * (what a runtime role needs, and nothing more). Run them as the owner role.
 */
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Migrations from "@effect-durable/pg/Migrations"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Effect from "effect/Effect"
import { json, toggle } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { checkFailed } from "../errors.js"
import * as Output from "../output.js"

/** What `migrate --dry-run` reports: the recorded version and the versions a migrate would apply. */
export const plan = Effect.gen(function*() {
  const settings = yield* DurableSettings
  const applied = new Set(yield* Migrations.appliedVersions)
  const version = Math.max(0, ...applied)
  const pending = Migrations.migrations.filter((m) => !applied.has(m.version)).map(({ name, version }) => ({
    version,
    name
  }))
  return { schema: settings.schema, version, latest: Migrations.latestVersion, pending }
})

const newerNote = (version: number) =>
  version > Migrations.latestVersion
    ? Output.note(
      `note: the schema is at version ${version}, newer than this release knows (${Migrations.latestVersion})`
    )
    : Effect.void

export const migrate = Command.make(
  "migrate",
  { dryRun: toggle("dry-run", "List the pending versions; change nothing"), json },
  Effect.fn("effect-durable.migrate")(
    function*(args) {
      if (args.dryRun) {
        const p = yield* plan
        if (args.json) return yield* Output.json(p)
        yield* newerNote(p.version)
        return yield* Output.line(
          p.pending.length === 0
            ? `schema ${p.schema} is at version ${p.version}: nothing to apply`
            : `schema ${p.schema} is at version ${p.version}; migrate would apply:\n${
              p.pending.map((m) => `  ${m.version}  ${m.name}`).join("\n")
            }`
        )
      }
      const settings = yield* DurableSettings
      if (!args.json) yield* Output.note(`migrating schema ${settings.schema}...`)
      const report = yield* Migrations.migrate()
      if (args.json) return yield* Output.json({ schema: settings.schema, ...report })
      yield* newerNote(report.version)
      yield* Output.line(
        report.applied.length === 0
          ? `schema ${settings.schema} is at version ${report.version}: nothing to apply`
          : `${
            report.applied.map((m) => `applied ${m.version}  ${m.name}`).join("\n")
          }\nschema ${settings.schema} is at version ${report.version}`
      )
    },
    withDatabase({ anyVersion: true, poolSize: 1 })
  )
).pipe(Command.withDescription("Apply the pending migrations (--dry-run lists them)"))

export const verify = Command.make(
  "verify",
  { json },
  Effect.fn("effect-durable.verify")(function*(args) {
    const settings = yield* DurableSettings
    const drift = yield* Migrations.verifySchema
    const version = Math.max(0, ...(yield* Migrations.appliedVersions))
    if (args.json) yield* Output.json({ schema: settings.schema, version, latest: Migrations.latestVersion, drift })
    else if (drift.length === 0) {
      yield* Output.line(`schema ${settings.schema} (version ${version}) matches the migrations: no drift`)
    } else {
      yield* Output.line(Output.table<(typeof drift)[number]>([
        { header: "KIND", value: (d) => d.kind },
        { header: "OBJECT", value: (d) => d.object },
        { header: "EXPECTED", value: (d) => Output.clip(d.expected, 50) },
        { header: "ACTUAL", value: (d) => Output.clip(d.actual, 50) }
      ], drift))
    }
    if (drift.length > 0) {
      return yield* checkFailed(
        `schema ${settings.schema}: ${Output.plural(drift.length, "difference")} from the migrations`
      )
    }
  }, withDatabase({ anyVersion: true, poolSize: 1 }))
).pipe(Command.withDescription("Compare the schema with what the migrations build; exit 1 on drift"))

export const grant = Command.make(
  "grant",
  {
    role: Argument.String("role").pipe(
      Argument.withMetavar("ROLE"),
      Argument.withDescription("An existing role (CREATE ROLE app_runtime LOGIN ...)")
    ),
    json
  },
  Effect.fn("effect-durable.grant")(
    function*(args) {
      const settings = yield* DurableSettings
      yield* Migrations.grantRuntimeAccess(args.role)
      if (args.json) return yield* Output.json({ schema: settings.schema, role: args.role, granted: true })
      yield* Output.line(
        `granted ${args.role} runtime access to schema ${settings.schema} (later migrations extend it)`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Grant a runtime role what the substrate needs, and nothing more"))
