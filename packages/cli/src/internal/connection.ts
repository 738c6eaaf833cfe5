/**
 * Where the command connects and with what settings: `--database-url`, then `DATABASE_URL`;
 * `--schema`, then `DURABLE_SCHEMA`; every other setting from the library's own variables
 * (`DURABLE_CONNECT_TIMEOUT`, `DURABLE_STATEMENT_TIMEOUT`, ...), read and checked by
 * `Durable.layerConfig` itself. The flags are laid over the environment as a
 * `ConfigProvider`, so there is one reading of the configuration, the library's.
 */
import { Command, Options } from "@effect/cli"
import { SchemaVersionMismatch } from "@effect-durable/core/Errors"
import * as Durable from "@effect-durable/pg/Durable"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Migrations from "@effect-durable/pg/Migrations"
import * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { CliError, fromLibrary, usage } from "./errors.js"
import { registerUrlSecrets } from "./output.js"

const databaseUrl = Options.redacted("database-url").pipe(
  Options.withPseudoName("URL"),
  Options.optional,
  Options.withDescription("PostgreSQL URL (default: $DATABASE_URL); its password is never printed")
)
const schema = Options.text("schema").pipe(
  Options.withPseudoName("NAME"),
  Options.optional,
  Options.withDescription("Schema of the substrate's tables (default: $DURABLE_SCHEMA, then durable)")
)
const verbose = Options.boolean("verbose").pipe(
  Options.withDescription("Debug logs on stderr, and the cause of an error")
)

/** The root command: its options are global, read by every command with `yield* root`. */
export const root = Command.make("effect-durable", { databaseUrl, schema, verbose })

export type Database = Durable.Services | OutboxSearch.OutboxSearch

/** Defaults of the command that differ from an application's. */
const CLI_DEFAULTS = new Map([
  ["DURABLE_APPLICATION_NAME", "effect-durable-cli"],
  ["DURABLE_POOL_SIZE", "4"]
])

/**
 * The configuration: the flags, over the environment, over the command's defaults, as one
 * map (so an invalid value is reported by its variable's name, never skipped for another:
 * a provider chained with `orElse` would fall back past it).
 */
const configValues = Effect.gen(function*() {
  const flags = yield* root
  const values = new Map<string, string>(CLI_DEFAULTS)
  for (const [key, value] of Object.entries(process.env)) if (value !== undefined) values.set(key, value)
  if (Option.isSome(flags.databaseUrl)) values.set("DATABASE_URL", Redacted.value(flags.databaseUrl.value))
  if (Option.isSome(flags.schema)) values.set("DURABLE_SCHEMA", flags.schema.value)
  const url = values.get("DATABASE_URL")?.trim() ?? ""
  if (url === "") return yield* usage("no database: pass --database-url <url> or set DATABASE_URL")
  registerUrlSecrets(url)
  return values
})

/** `configValues` as the `ConfigProvider` the library's `Config`s read. */
export const configProvider = Effect.map(configValues, (values) => ConfigProvider.fromEnvRecord(values))

/** The substrate (and `OutboxSearch`) on the configured database; connects when built. */
export const databaseLayer = (options: { readonly poolSize?: number } = {}) =>
  Layer.unwrap(Effect.map(Effect.zip(configValues, root), ([values, flags]) => {
    const given = new Set([
      ...(Option.isSome(flags.databaseUrl) ? ["DATABASE_URL"] : []),
      ...(Option.isSome(flags.schema) ? ["DURABLE_SCHEMA"] : [])
    ])
    // A command that needs few connections opens few, whatever the application's pool size.
    const sized = new Map(values)
    if (options.poolSize !== undefined) sized.set("DURABLE_POOL_SIZE", String(options.poolSize))
    // The version is checked per command: migrate, verify and doctor run on any version.
    return OutboxSearch.layer.pipe(
      Layer.provideMerge(Durable.layerConfig({ checkSchemaVersion: false })),
      Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord(sized))),
      Layer.mapError((error) => named(fromLibrary(error) as CliError, given))
    )
  })).pipe(Layer.mapError((error) => fromLibrary(error) as CliError))

/** A configuration error of a variable the user gave as a flag names the flag. */
const named = (error: CliError, flags: ReadonlySet<string>): CliError => {
  const invalid = /^invalid (DATABASE_URL|DURABLE_SCHEMA): (.*?)( — .*)?$/s.exec(error.message)
  if (invalid === null || !flags.has(invalid[1]!)) return error
  return new CliError({ exitCode: error.exitCode, message: `invalid ${FLAG_OF[invalid[1]!]}: ${invalid[2]}`, cause: error.cause })
}
const FLAG_OF: Readonly<Record<string, string>> = { DATABASE_URL: "--database-url", DURABLE_SCHEMA: "--schema" }

/** Fails with `SchemaVersionMismatch` (exit 4) unless the schema is at this release's version. */
export const requireCurrentSchema = Effect.gen(function*() {
  const settings = yield* DurableSettings
  const versions = yield* Migrations.appliedVersions
  const found = versions.length === 0 ? 0 : Math.max(...versions)
  if (found !== Migrations.latestVersion) {
    return yield* new SchemaVersionMismatch({ schema: settings.schema, found, needed: Migrations.latestVersion })
  }
})

/**
 * Runs a command's work on the database: builds the substrate (a connection failure is exit
 * 3), checks the schema version unless `anyVersion`, and maps the library's typed errors.
 */
export const withDatabase = (options: { readonly anyVersion?: boolean; readonly poolSize?: number } = {}) =>
<A, E, R>(work: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    if (options.anyVersion !== true) yield* requireCurrentSchema
    return yield* work
  }).pipe(
    // Every failure here is the library's (typed) or already a CliError.
    Effect.mapError((error: unknown) => fromLibrary(error) as CliError),
    Effect.provide(databaseLayer(options))
  )
