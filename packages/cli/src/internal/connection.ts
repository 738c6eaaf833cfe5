/**
 * Where the command connects and with what settings: `--database-url` (or the URL in
 * `--database-url-file`), then `DATABASE_URL`, then the project's development database
 * (`--dev` asks for it; without any URL it is the default when the folder or one above it
 * has one); `--schema`, then `DURABLE_SCHEMA`; every other setting from the library's own variables
 * (`DURABLE_CONNECT_TIMEOUT`, `DURABLE_STATEMENT_TIMEOUT`, ...), read and checked by
 * `Durable.layerConfig` itself. The flags are laid over the environment as a
 * `ConfigProvider`, so there is one reading of the configuration, the library's.
 *
 * (`Flag.withFallbackConfig` does not fit here: the library reads `DATABASE_URL` itself, and
 * an error must name the flag only when the user typed the flag.)
 */
import * as Durable from "@effect-durable/pg/Durable"
import { classifySqlErrors } from "@effect-durable/pg/ErrorClassification"
import * as Migrations from "@effect-durable/pg/Migrations"
import * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { resolve } from "node:path"
import { toggle } from "./arguments.js"
import {
  CurrentDevDatabase,
  DEV_DIRECTORY,
  DEV_MARKER,
  findDevDirectory,
  hasDevDatabase,
  openDevDatabase,
  startedNote
} from "./devDatabase.js"
import { CommandError, fromLibrary, isCommandError, usage } from "./errors.js"
import { note, registerUrlSecrets } from "./output.js"

const databaseUrl = Flag.Redacted("database-url").pipe(
  Flag.withMetavar("URL"),
  Flag.optional,
  Flag.withDescription(
    "PostgreSQL URL (default: $DATABASE_URL); never printed, but other users of the machine see a command line: prefer DATABASE_URL or --database-url-file"
  )
)
const databaseUrlFile = Flag.FileText("database-url-file").pipe(
  Flag.withMetavar("PATH"),
  Flag.optional,
  Flag.withDescription("A file holding the PostgreSQL URL (one line), instead of --database-url")
)
const schema = Flag.String("schema").pipe(
  Flag.withMetavar("NAME"),
  Flag.optional,
  Flag.withDescription("Schema of the substrate's tables (default: $DURABLE_SCHEMA, then durable)")
)
const verbose = toggle("verbose", "Debug logs on stderr, and the cause of an error")
const DEV_DESCRIPTION =
  `Use the project's development database (${DEV_DIRECTORY} here or above; the default without a URL), started for the command if no app serves it`
const dev = toggle("dev", DEV_DESCRIPTION)
const devDirectory = Flag.String("dev-directory").pipe(
  Flag.withMetavar("PATH"),
  Flag.optional,
  Flag.withDescription(
    "The development database's folder, when the app gives DevDatabase another directory; implies --dev"
  )
)

/**
 * The root command. Its flags are shared: accepted before the command or after it, and read
 * by every command with `yield* root`.
 */
export const root = Command.make("effect-durable").pipe(
  Command.withSharedFlags({ databaseUrl, databaseUrlFile, dev, devDirectory, schema, verbose }),
  Command.withDescription(
    "Operate an effect-durable substrate: its schema, messages, dead letters, retention and admin page. " +
      "Every flag is optional unless its help says Required; a flag's default is in its help."
  )
)

export type Database = Durable.Services | OutboxSearch.OutboxSearch

/** Defaults of the command that differ from an application's. */
const CLI_DEFAULTS: Readonly<Record<string, string>> = {
  DURABLE_APPLICATION_NAME: "effect-durable-cli",
  DURABLE_POOL_SIZE: "4"
}

/**
 * The development database's folder: `--dev-directory`, else the nearest one found from the
 * working directory up. With `create` (`dev-database`), where a new one goes when there is
 * none; otherwise none is a usage error that names where it looked and how to make one.
 */
export const devDirectoryOf = (options: { readonly create: boolean }) =>
  Effect.gen(function*() {
    const flags = yield* root
    const cwd = process.cwd()
    if (Option.isSome(flags.devDirectory)) {
      const directory = resolve(cwd, flags.devDirectory.value)
      if (options.create || hasDevDatabase(directory)) return directory
      return yield* usage(
        `--dev-directory: no development database in ${directory} (no ${DEV_MARKER}): ` +
          "start the app once on it, or create it with effect-durable dev-database --dev-directory <path>"
      )
    }
    const found = findDevDirectory(cwd)
    if (found !== undefined) return found
    if (options.create) return resolve(cwd, DEV_DIRECTORY)
    return yield* usage(
      `--dev: no development database in ${cwd} or a folder above it (looked for ${DEV_DIRECTORY}/${DEV_MARKER}): ` +
        "start the app once (DevDatabase.layerDatabaseUrl() creates it), or create it with effect-durable dev-database"
    )
  })

/** The flag a command was given a URL with, if any. */
export const urlFlagOf = Effect.map(root, (flags) =>
  Option.isSome(flags.databaseUrl)
    ? "--database-url"
    : Option.isSome(flags.databaseUrlFile)
    ? "--database-url-file"
    : undefined)

/** The environment over the command's defaults, and `--schema` over both: everything but where to connect. */
const baseValues = Effect.map(root, (flags) => {
  const values: Record<string, string> = { ...CLI_DEFAULTS }
  for (const [key, value] of Object.entries(process.env)) if (value !== undefined) values[key] = value
  if (Option.isSome(flags.schema)) values.DURABLE_SCHEMA = flags.schema.value
  return values
})

interface Settings {
  readonly values: Readonly<Record<string, string>>
  /** The development database's folder when the command runs on it (its URL is known once it is open). */
  readonly dev: string | undefined
}

/**
 * The configuration: the flags, over the environment, over the command's defaults, as one
 * record (so an invalid value is reported by its variable's name, never skipped for another:
 * a provider chained with `orElse` would fall back past it).
 */
const configValues = Effect.gen(function*() {
  const flags = yield* root
  const values = yield* baseValues
  if (Option.isSome(flags.databaseUrl) && Option.isSome(flags.databaseUrlFile)) {
    return yield* usage("pass --database-url or --database-url-file, not both")
  }
  const urlFlag = yield* urlFlagOf
  const wantsDev = flags.dev || Option.isSome(flags.devDirectory)
  if (wantsDev && urlFlag !== undefined) {
    return yield* usage(
      `${flags.dev ? "--dev" : "--dev-directory"} and ${urlFlag} name two databases: pass one of them`
    )
  }
  // An explicit --dev wins over a DATABASE_URL in the environment, as every flag wins over its variable.
  if (wantsDev) return { values, dev: yield* devDirectoryOf({ create: false }) }
  if (Option.isSome(flags.databaseUrl)) {
    values.DATABASE_URL = Redacted.value(flags.databaseUrl.value)
    yield* warnCommandLinePassword(values.DATABASE_URL)
  }
  if (Option.isSome(flags.databaseUrlFile)) values.DATABASE_URL = flags.databaseUrlFile.value.trim()
  const url = values.DATABASE_URL?.trim() ?? ""
  if (url === "") {
    // No URL anywhere: on a laptop, the project's development database is the one meant.
    const found = findDevDirectory(process.cwd())
    if (found !== undefined) return { values, dev: found }
    return yield* usage(
      "no database: pass --database-url <url>, set DATABASE_URL, or run it in a project that has a development database (--dev)"
    )
  }
  registerUrlSecrets(url)
  return { values, dev: undefined } satisfies Settings
})

let warned = false

/**
 * A password on the command line is never printed here, but every user of the machine can
 * read it while the command runs (`ps`, `/proc/<pid>/cmdline`); the environment and a file
 * are the owner's only. Said once per run, on stderr.
 */
const warnCommandLinePassword = (url: string) =>
  Effect.suspend(() => {
    if (warned || !hasPassword(url)) return Effect.void
    warned = true
    return note(
      "effect-durable: warning: --database-url puts the password on the command line, where other users of this machine " +
        "can read it (ps, /proc/<pid>/cmdline): set DATABASE_URL, or pass --database-url-file <path> (a file only you can read)"
    )
  })

const hasPassword = (url: string): boolean => {
  try {
    return new URL(url).password !== ""
  } catch {
    // Not a URL (the library says so): it may still hold one; say it.
    return url.includes("@")
  }
}

/**
 * `configValues` as the `ConfigProvider` the library's `Config`s read. With `keepEmpty`, a
 * variable set to the empty string is there, empty (a dashboard secret set to nothing is an
 * error, not a page without credentials); otherwise it counts as not set.
 */
export const configProvider = (options: { readonly keepEmpty?: boolean } = {}) =>
  Effect.map(
    configValues,
    ({ values }) => ConfigProvider.fromEnvRecord(values, { preserveEmptyStrings: options.keepEmpty === true })
  )

/** The substrate (and `OutboxSearch`) on the configured database; connects when built. */
const databaseLayer = (values: Readonly<Record<string, string>>, options: { readonly poolSize?: number }) =>
  // The version is checked per command: migrate, verify and doctor run on any version.
  OutboxSearch.layer.pipe(
    Layer.provideMerge(Durable.layerConfig({ checkSchemaVersion: false })),
    Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord({
      ...values,
      // A command that needs few connections opens few, whatever the application's pool size.
      ...(options.poolSize === undefined ? {} : { DURABLE_POOL_SIZE: String(options.poolSize) })
    })))
  )

/** A configuration error of a variable the user gave as a flag names the flag. */
const named = (error: CommandError, flags: ReadonlySet<string>): CommandError => {
  const invalid = /^invalid (DATABASE_URL|DURABLE_SCHEMA): (.*?)( — .*)?$/s.exec(error.message)
  if (invalid === null) return error
  const variable = invalid[1] === "DATABASE_URL" && flags.has("DATABASE_URL_FILE") ? "DATABASE_URL_FILE" : invalid[1]!
  if (!flags.has(variable)) return error
  return new CommandError({
    exitCode: error.exitCode,
    message: `invalid ${FLAG_OF[variable]}: ${invalid[2]}`,
    cause: error.cause
  })
}
const FLAG_OF: Readonly<Record<string, string>> = {
  DATABASE_URL: "--database-url",
  DATABASE_URL_FILE: "--database-url-file",
  DURABLE_SCHEMA: "--schema"
}

/** Fails with `SchemaVersionMismatch` (exit 4) unless the schema is at this release's version. */
export const requireCurrentSchema = Migrations.checkSchemaVersion

/** One round trip: the pool connects on first use, so this is where an unreachable database shows. */
const connect = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT 1`).pipe(classifySqlErrors("connect"))

/**
 * The configuration with the database's URL: on the development database, the URL of the
 * one a command already opened (`dev-database`), or of the one opened now for the scope (the
 * app's server, or one this command starts and says so).
 */
const connectionValues = Effect.gen(function*() {
  const opened = yield* CurrentDevDatabase
  if (opened !== undefined) return { ...(yield* baseValues), DATABASE_URL: Redacted.value(opened.url) }
  const { dev, values } = yield* configValues
  if (dev === undefined) return values
  const database = yield* openDevDatabase(dev)
  if (database.owned) yield* startedNote(database)
  return { ...values, DATABASE_URL: Redacted.value(database.url) }
})

/**
 * Runs a command's work on the database: builds the substrate and connects (a connection
 * failure is exit 3, before any work), checks the schema version unless `anyVersion`, and
 * maps the library's typed errors. A development database the command started stops when
 * the work ends (`dashboard`: when it stops serving).
 */
export const withDatabase =
  (options: { readonly anyVersion?: boolean; readonly poolSize?: number } = {}) =>
  <A, E, R>(work: Effect.Effect<A, E, R>) =>
    Effect.scoped(Effect.gen(function*() {
      const values = yield* connectionValues
      const flags = yield* root
      const given = new Set([
        ...(Option.isSome(flags.databaseUrl) ? ["DATABASE_URL"] : []),
        ...(Option.isSome(flags.databaseUrlFile) ? ["DATABASE_URL_FILE"] : []),
        ...(Option.isSome(flags.schema) ? ["DURABLE_SCHEMA"] : [])
      ])
      return yield* Effect.gen(function*() {
        yield* options.anyVersion === true ? connect : requireCurrentSchema
        return yield* work
      }).pipe(
        Effect.provide(databaseLayer(values, options)),
        // Every failure here is the library's (typed) or already a CommandError.
        Effect.mapError((error: unknown) => {
          const mapped = fromLibrary(error)
          return isCommandError(mapped) ? named(mapped, given) : mapped as CommandError
        })
      )
    }))
