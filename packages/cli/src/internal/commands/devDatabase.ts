/**
 * `effect-durable dev-database [--migrate]`: starts the project's development database
 * (creating it on first use) and keeps it running until Ctrl-C or SIGTERM, so the other
 * commands, `psql` and the app itself use it on a laptop while the app is stopped or
 * restarted. The app started meanwhile (`DevDatabase.layerDatabaseUrl()`) attaches to this
 * server; when the app already serves it, there is nothing to keep running and it says so.
 */
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Migrations from "@effect-durable/pg/Migrations"
import * as Command from "effect/cli/Command"
import * as Effect from "effect/Effect"
import { join } from "node:path"
import { toggle } from "../arguments.js"
import { devDirectoryOf, urlFlagOf, withDatabase } from "../connection.js"
import { CurrentDevDatabase, DEV_MARKER, type OpenDevDatabase, openDevDatabase, shownUrl } from "../devDatabase.js"
import { usage } from "../errors.js"
import * as Output from "../output.js"

const migrateOn = (database: OpenDevDatabase) =>
  withDatabase({ anyVersion: true, poolSize: 1 })(Effect.gen(function*() {
    const settings = yield* DurableSettings
    const report = yield* Migrations.migrate()
    yield* Output.note(
      `effect-durable dev-database: schema ${settings.schema} is at version ${report.version}${
        report.applied.length === 0 ? "" : ` (applied ${report.applied.map((m) => m.version).join(", ")})`
      }`
    )
  })).pipe(Effect.provideService(CurrentDevDatabase, database))

export const devDatabase = Command.make(
  "dev-database",
  { migrate: toggle("migrate", "Apply the pending migrations once it runs, as migrate does") },
  Effect.fn("effect-durable.dev-database")(function*(args) {
    const urlFlag = yield* urlFlagOf
    if (urlFlag !== undefined) {
      return yield* usage(`dev-database runs the project's development database; it takes no ${urlFlag}`)
    }
    const directory = yield* devDirectoryOf({ create: true })
    return yield* Effect.scoped(Effect.gen(function*() {
      const database = yield* openDevDatabase(directory)
      if (args.migrate) yield* migrateOn(database)
      const where = `${shownUrl(database)} (password in ${join(database.directory, DEV_MARKER)})`
      if (!database.owned) {
        return yield* Output.note(
          `effect-durable dev-database: already running, served by another process (the app?): ${where}; ` +
            "it runs as long as that process does"
        )
      }
      yield* Output.note(
        `effect-durable dev-database: ${database.created ? "created and started" : "started"} ${where}; ` +
          `data in ${database.directory}; Ctrl-C stops it`
      )
      return yield* Effect.never
    }))
  })
).pipe(
  Command.withDescription(
    "Start the project's development database (created on first use) and keep it running until Ctrl-C"
  )
)
