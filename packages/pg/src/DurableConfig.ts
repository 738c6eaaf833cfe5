/**
 * Configuration of the substrate: where its tables live and how long a statement may wait,
 * plus the connection settings for the `PgClient` that `Durable.layer` builds. Every value
 * is decoded by one `Schema` when the layer is built, from code or from `Config`; a bad one
 * is a `DurableConfigError` naming the field.
 *
 * @since 0.1.0
 */
import type { DurableConfigError } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { quote } from "./internal/sqlText.js"

/** Every default of this module, read by the schemas and by `config`. */
export const Defaults = {
  schema: "durable",
  lockTimeout: "5 seconds",
  poolSize: 10,
  connectTimeout: "10 seconds",
  idleTimeout: "30 seconds",
  applicationName: "effect-durable",
  preparedStatements: true,
  synchronousWorkerCommits: true
} as const

/** What the substrate's services need to know, as the user writes it. */
export interface SettingsInput {
  /** Schema of every substrate table; quoted, so mixed case is kept. Default `durable`. */
  readonly schema?: string
  /** Longest wait for a row or advisory lock inside a substrate transaction. Default 5 s. */
  readonly lockTimeout?: Duration.Input
  /** Longest run of one statement inside a substrate transaction. Default: the server's. */
  readonly statementTimeout?: Duration.Input
  /**
   * Whether a worker's claims, marks, renewals and give-backs (outside any transaction of
   * yours) wait for their WAL flush. `false` trades a few duplicate deliveries after a
   * database crash for less commit latency and I/O; fencing keeps every guarantee (see the
   * README's Reliability section). Default true.
   */
  readonly synchronousWorkerCommits?: boolean
}

/** Validated settings, as the services use them. */
export interface Settings {
  readonly schema: string
  /** `"schema"` quoted, for SQL text. */
  readonly quotedSchema: string
  readonly lockTimeout: Duration.Duration
  readonly statementTimeout: Option.Option<Duration.Duration>
  readonly synchronousWorkerCommits: boolean
  /** `"schema"."table"` for SQL text; the table names are our own constants. */
  readonly table: (name: string) => string
}

export class DurableSettings extends Context.Service<DurableSettings, Settings>()("@effect-durable/pg/DurableSettings") {}

const Timeout = Input.DurationIn({ max: "1 day" })

const SettingsSchema = Schema.Struct({
  schema: Input.MixedCaseIdentifier.pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.schema))),
  lockTimeout: Timeout.pipe(Schema.withDecodingDefaultType(Effect.sync(() => Duration.fromInputUnsafe(Defaults.lockTimeout)))),
  statementTimeout: Schema.OptionFromOptional(Timeout),
  synchronousWorkerCommits: Schema.Boolean.pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.synchronousWorkerCommits)))
})
const decodeSettings = Input.options(SettingsSchema)

/** Validates settings; the first rule broken is reported with the field it concerns. */
export const makeSettings = (input: SettingsInput = {}): Effect.Effect<Settings, DurableConfigError> =>
  Effect.map(decodeSettings(input), ({ lockTimeout, schema, statementTimeout, synchronousWorkerCommits }) => {
    const quotedSchema = quote(schema)
    return {
      schema,
      quotedSchema,
      lockTimeout,
      statementTimeout,
      synchronousWorkerCommits,
      table: (name) => `${quotedSchema}.${quote(name)}`
    }
  })

export const layerSettings = (input: SettingsInput = {}): Layer.Layer<DurableSettings, DurableConfigError> =>
  Layer.effect(DurableSettings, makeSettings(input))

/** Connection settings for the `PgClient` that `Durable.layer` builds. */
export interface ConnectionInput {
  readonly url: Redacted.Redacted<string>
  /** Most connections the pool opens. Default 10. */
  readonly poolSize?: number
  /** Longest wait to open a connection. Default 10 s. */
  readonly connectTimeout?: Duration.Input
  /** How long an unused connection stays open. Default 30 s. */
  readonly idleTimeout?: Duration.Input
  /** Shown in `pg_stat_activity`. Default `effect-durable`. */
  readonly applicationName?: string
  /**
   * Whether statements are prepared (named, cached per connection). Default true. Set false
   * behind a transaction-mode pooler that cannot keep named statements (PgBouncer before 1.21,
   * or without `max_prepared_statements`).
   */
  readonly preparedStatements?: boolean
}

export interface Connection {
  readonly url: Redacted.Redacted<string>
  readonly poolSize: number
  readonly connectTimeout: Duration.Duration
  readonly idleTimeout: Duration.Duration
  readonly applicationName: string
  readonly preparedStatements: boolean
}

const Url = Schema.Redacted(Schema.String).check(Schema.makeFilter((url) => /^postgres(ql)?:\/\/\S+$/.test(Redacted.value(url).trim()), { message: "a PostgreSQL URL (postgres://user:password@host:port/database)" }))

const ConnectionSchema = Schema.Struct({
  url: Url,
  poolSize: Input.Count(1000).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.poolSize))),
  connectTimeout: Timeout.pipe(Schema.withDecodingDefaultType(Effect.sync(() => Duration.fromInputUnsafe(Defaults.connectTimeout)))),
  idleTimeout: Timeout.pipe(Schema.withDecodingDefaultType(Effect.sync(() => Duration.fromInputUnsafe(Defaults.idleTimeout)))),
  // PostgreSQL truncates application_name at 63 bytes and replaces non-ASCII with '?'.
  applicationName: Schema.String.check(
    Schema.makeFilter((name) => /^[\x20-\x7e]{1,63}$/.test(name), { message: "1-63 printable ASCII characters" })
  ).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.applicationName))),
  preparedStatements: Schema.Boolean.pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.preparedStatements)))
})

export const makeConnection: (input: ConnectionInput) => Effect.Effect<Connection, DurableConfigError> = Input.options(
  ConnectionSchema
)

/** Every variable `Durable.layerConfig` reads: what it is for and a value that works. */
export const Variables: Readonly<Record<string, Input.VariableHint>> = {
  DATABASE_URL: { purpose: "the PostgreSQL URL of the application's database", example: "postgres://app:secret@127.0.0.1:5432/app" },
  DURABLE_POOL_SIZE: { purpose: "the most connections in the pool (1-1000)", example: "10" },
  DURABLE_CONNECT_TIMEOUT: { purpose: "the longest wait to open or acquire a connection", example: "10 seconds" },
  DURABLE_IDLE_TIMEOUT: { purpose: "how long an unused connection stays open", example: "30 seconds" },
  DURABLE_APPLICATION_NAME: { purpose: "application_name shown in pg_stat_activity", example: "orders-api" },
  DURABLE_PREPARED_STATEMENTS: {
    purpose: "whether statements are prepared; false behind a transaction pooler without prepared-statement support",
    example: "false"
  },
  DURABLE_SCHEMA: { purpose: "the schema of the substrate's tables", example: "durable" },
  DURABLE_LOCK_TIMEOUT: { purpose: "the longest lock wait inside a substrate transaction", example: "5 seconds" },
  DURABLE_STATEMENT_TIMEOUT: { purpose: "the longest statement inside a substrate transaction", example: "30 seconds" },
  DURABLE_SYNCHRONOUS_WORKER_COMMITS: {
    purpose: "whether a worker's claims, marks and renewals wait for their WAL flush (true or false)",
    example: "true"
  },
  DURABLE_OUTBOX_MAX_PAYLOAD_BYTES: { purpose: "the largest outbox payload, as canonical JSON bytes", example: "262144" },
  DURABLE_OUTBOX_MAX_ATTEMPTS: { purpose: "failed deliveries before an outbox message is dead", example: "25" },
  CURSOR_KEYS: {
    purpose: "keys that sign keyset cursors, newest first, secrets of at least 16 bytes",
    example: "k2=a-long-random-secret,k1=the-previous-secret"
  }
}

/** Which variable each decoded field comes from, to name it in errors. */
export const FieldVariables: Readonly<Record<string, string>> = {
  url: "DATABASE_URL",
  poolSize: "DURABLE_POOL_SIZE",
  connectTimeout: "DURABLE_CONNECT_TIMEOUT",
  idleTimeout: "DURABLE_IDLE_TIMEOUT",
  applicationName: "DURABLE_APPLICATION_NAME",
  preparedStatements: "DURABLE_PREPARED_STATEMENTS",
  schema: "DURABLE_SCHEMA",
  lockTimeout: "DURABLE_LOCK_TIMEOUT",
  statementTimeout: "DURABLE_STATEMENT_TIMEOUT",
  synchronousWorkerCommits: "DURABLE_SYNCHRONOUS_WORKER_COMMITS",
  maxPayloadBytes: "DURABLE_OUTBOX_MAX_PAYLOAD_BYTES",
  maxAttempts: "DURABLE_OUTBOX_MAX_ATTEMPTS"
}

// Config gives each variable as an Option; the schemas above apply the defaults (one source).
const present = <A extends Record<string, unknown>>(record: A) =>
  Object.fromEntries(
    Object.entries(record).flatMap(([key, value]) =>
      Option.isOption(value) ? (Option.isSome(value) ? [[key, value.value]] : []) : [[key, value]]
    )
  )
// What each variable is for is said once, in `Variables` (errors quote it).
const variable = <A>(config: Config.Config<A>) => Config.option(config)

/** Everything `Durable.layerConfig` reads; unset variables take the defaults above. */
export const config: Config.Config<{
  readonly connection: ConnectionInput
  readonly settings: SettingsInput
  readonly outbox: { readonly maxPayloadBytes?: number; readonly maxAttempts?: number }
}> = Config.all({
  outbox: Config.all({
    maxPayloadBytes: variable(Config.Int("DURABLE_OUTBOX_MAX_PAYLOAD_BYTES")),
    maxAttempts: variable(Config.Int("DURABLE_OUTBOX_MAX_ATTEMPTS"))
  }).pipe(Config.map(present)),
  connection: Config.all({
    url: Config.Redacted("DATABASE_URL"),
    poolSize: variable(Config.Int("DURABLE_POOL_SIZE")),
    connectTimeout: variable(Config.String("DURABLE_CONNECT_TIMEOUT")),
    idleTimeout: variable(Config.String("DURABLE_IDLE_TIMEOUT")),
    applicationName: variable(Config.String("DURABLE_APPLICATION_NAME")),
    preparedStatements: variable(Config.Boolean("DURABLE_PREPARED_STATEMENTS"))
  }).pipe(Config.map(present)),
  settings: Config.all({
    schema: variable(Config.String("DURABLE_SCHEMA")),
    lockTimeout: variable(Config.String("DURABLE_LOCK_TIMEOUT")),
    statementTimeout: variable(Config.String("DURABLE_STATEMENT_TIMEOUT")),
    synchronousWorkerCommits: variable(Config.Boolean("DURABLE_SYNCHRONOUS_WORKER_COMMITS"))
  }).pipe(Config.map(present))
}) as Config.Config<any>
