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
import * as Options from "@effect-durable/core/Options"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { quote } from "./internal/sqlText.js"

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

export class DurableSettings
  extends Context.Service<DurableSettings, Settings>()("@effect-durable/pg/DurableSettings")
{}

const Timeout = Input.DurationIn({ max: "1 day" })

/** The substrate's settings, each declared once: rule, default, variable, purpose, example. */
export const SettingsOptions = Options.declare({
  schema: Options.option({
    schema: Input.MixedCaseIdentifier,
    default: "durable",
    variable: "DURABLE_SCHEMA",
    purpose: "the schema of the substrate's tables",
    example: "durable"
  }),
  lockTimeout: Options.option({
    schema: Timeout,
    default: "5 seconds",
    variable: "DURABLE_LOCK_TIMEOUT",
    purpose: "the longest lock wait inside a substrate transaction",
    example: "5 seconds"
  }),
  statementTimeout: Options.option({
    schema: Timeout,
    optional: true,
    variable: "DURABLE_STATEMENT_TIMEOUT",
    purpose: "the longest statement inside a substrate transaction (default: the server's)",
    example: "30 seconds"
  }),
  synchronousWorkerCommits: Options.option({
    schema: Schema.Boolean,
    default: true,
    variable: "DURABLE_SYNCHRONOUS_WORKER_COMMITS",
    text: "boolean",
    purpose: "whether a worker's claims, marks and renewals wait for their WAL flush (true or false)",
    example: "true"
  })
})

/** Validates settings; the first rule broken is reported with the field it concerns. */
export const makeSettings = (input: SettingsInput = {}): Effect.Effect<Settings, DurableConfigError> =>
  Effect.map(SettingsOptions.decode(input), ({ lockTimeout, schema, statementTimeout, synchronousWorkerCommits }) => {
    const quotedSchema = quote(schema)
    return {
      schema,
      quotedSchema,
      lockTimeout,
      statementTimeout: Option.fromNullishOr(statementTimeout),
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

const Url = Schema.Redacted(Schema.String).check(
  Schema.makeFilter((url) => /^postgres(ql)?:\/\/\S+$/.test(Redacted.value(url).trim()), {
    message: "a PostgreSQL URL (postgres://user:password@host:port/database)"
  })
)

/** The connection `Durable.layer` opens, each setting declared once. */
export const ConnectionOptions = Options.declare({
  url: Options.option({
    schema: Url,
    variable: "DATABASE_URL",
    text: "redacted",
    purpose: "the PostgreSQL URL of the application's database",
    example: "postgres://app:secret@127.0.0.1:5432/app"
  }),
  poolSize: Options.option({
    schema: Input.Count(1000),
    default: 10,
    variable: "DURABLE_POOL_SIZE",
    text: "integer",
    purpose: "the most connections in the pool (1-1000)",
    example: "10"
  }),
  connectTimeout: Options.option({
    schema: Timeout,
    default: "10 seconds",
    variable: "DURABLE_CONNECT_TIMEOUT",
    purpose: "the longest wait to open or acquire a connection",
    example: "10 seconds"
  }),
  idleTimeout: Options.option({
    schema: Timeout,
    default: "30 seconds",
    variable: "DURABLE_IDLE_TIMEOUT",
    purpose: "how long an unused connection stays open",
    example: "30 seconds"
  }),
  // PostgreSQL truncates application_name at 63 bytes and replaces non-ASCII with '?'.
  applicationName: Options.option({
    schema: Schema.String.check(
      Schema.makeFilter((name) => /^[\x20-\x7e]{1,63}$/.test(name), { message: "1-63 printable ASCII characters" })
    ),
    default: "effect-durable",
    variable: "DURABLE_APPLICATION_NAME",
    purpose: "application_name shown in pg_stat_activity",
    example: "orders-api"
  }),
  preparedStatements: Options.option({
    schema: Schema.Boolean,
    default: true,
    variable: "DURABLE_PREPARED_STATEMENTS",
    text: "boolean",
    purpose: "whether statements are prepared; false behind a transaction pooler without prepared-statement support",
    example: "false"
  })
})

export const makeConnection: (input: ConnectionInput) => Effect.Effect<Connection, DurableConfigError> =
  ConnectionOptions.decode

/** Every default of this module (the settings' and the connection's), from their declarations. */
export const Defaults = { ...SettingsOptions.defaults, ...ConnectionOptions.defaults }

/** The variables of the connection and the settings, and `CURSOR_KEYS`: what each is for and a value that works. */
export const Variables: Readonly<Record<string, Input.VariableHint>> = {
  ...ConnectionOptions.variables,
  ...SettingsOptions.variables,
  CURSOR_KEYS: {
    purpose: "keys that sign keyset cursors, newest first, secrets of at least 16 bytes",
    example: "k2=a-long-random-secret,k1=the-previous-secret"
  }
}
