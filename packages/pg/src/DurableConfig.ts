/**
 * Configuration of the substrate: where its tables live and how long a statement may wait,
 * plus the connection settings for the `PgClient` that `Durable.layer` builds. Every value
 * is validated when the layer is built; a bad one is a `DurableConfigError` naming the field.
 *
 * @since 0.1.0
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { quote, SCHEMA_IDENTIFIER, validateIdentifier } from "./internal/identifiers.js"

/** What the substrate's services need to know, as the user writes it. */
export interface SettingsInput {
  /** Schema of every substrate table; quoted, so mixed case is kept. Default `durable`. */
  readonly schema?: string
  /** Longest wait for a row or advisory lock inside a substrate transaction. Default 5 s. */
  readonly lockTimeout?: Duration.DurationInput
  /** Longest run of one statement inside a substrate transaction. Default: the server's. */
  readonly statementTimeout?: Duration.DurationInput
}

/** Validated settings, as the services use them. */
export interface Settings {
  readonly schema: string
  /** `"schema"` quoted, for SQL text. */
  readonly quotedSchema: string
  readonly lockTimeout: Duration.Duration
  readonly statementTimeout: Option.Option<Duration.Duration>
  /** `"schema"."table"` for SQL text; the table names are our own constants. */
  readonly table: (name: string) => string
}

export class DurableSettings extends Context.Tag("@effect-durable/pg/DurableSettings")<DurableSettings, Settings>() {}

const positiveDuration = (field: string, input: Duration.DurationInput) => {
  const duration = Duration.decodeUnknown(input)
  return Option.isSome(duration) && Duration.greaterThan(duration.value, Duration.zero) &&
      Duration.isFinite(duration.value)
    ? Either.right(duration.value)
    : Either.left(new DurableConfigError({ field, rule: "a finite duration greater than zero" }))
}

/** Validates settings; every rule broken is reported with the field it concerns. */
export const makeSettings = (input: SettingsInput = {}): Effect.Effect<Settings, DurableConfigError> =>
  Effect.gen(function*() {
    const schema = yield* validateIdentifier("schema", input.schema ?? "durable", SCHEMA_IDENTIFIER)
    const lockTimeout = yield* positiveDuration("lockTimeout", input.lockTimeout ?? "5 seconds")
    const statementTimeout = input.statementTimeout === undefined
      ? Option.none()
      : Option.some(yield* positiveDuration("statementTimeout", input.statementTimeout))
    const quotedSchema = quote(schema)
    return { schema, quotedSchema, lockTimeout, statementTimeout, table: (name) => `${quotedSchema}.${quote(name)}` }
  })

export const layerSettings = (input: SettingsInput = {}): Layer.Layer<DurableSettings, DurableConfigError> =>
  Layer.effect(DurableSettings, makeSettings(input))

/** Connection settings for the `PgClient` that `Durable.layer` builds. */
export interface ConnectionInput {
  readonly url: Redacted.Redacted<string>
  /** Most connections the pool opens. Default 10. */
  readonly poolSize?: number
  /** Longest wait to open a connection. Default 10 s. */
  readonly connectTimeout?: Duration.DurationInput
  /** How long an unused connection stays open. Default 30 s. */
  readonly idleTimeout?: Duration.DurationInput
  /** Shown in `pg_stat_activity`. Default `effect-durable`. */
  readonly applicationName?: string
}

export interface Connection {
  readonly url: Redacted.Redacted<string>
  readonly poolSize: number
  readonly connectTimeout: Duration.Duration
  readonly idleTimeout: Duration.Duration
  readonly applicationName: string
}

export const makeConnection = (input: ConnectionInput): Effect.Effect<Connection, DurableConfigError> =>
  Effect.gen(function*() {
    const url = Redacted.value(input.url).trim()
    if (url.length === 0) return yield* new DurableConfigError({ field: "url", rule: "a non-empty PostgreSQL URL" })
    if (!/^postgres(ql)?:\/\//.test(url)) {
      return yield* new DurableConfigError({ field: "url", rule: "a URL starting with postgres:// or postgresql://" })
    }
    const poolSize = input.poolSize ?? 10
    if (!Number.isInteger(poolSize) || poolSize < 1 || poolSize > 1000) {
      return yield* new DurableConfigError({ field: "poolSize", rule: "an integer from 1 to 1000" })
    }
    const applicationName = input.applicationName ?? "effect-durable"
    // PostgreSQL truncates application_name at 63 bytes and replaces non-ASCII with '?'.
    if (!/^[\x20-\x7e]{1,63}$/.test(applicationName)) {
      return yield* new DurableConfigError({ field: "applicationName", rule: "1-63 printable ASCII characters" })
    }
    return {
      url: input.url,
      poolSize,
      connectTimeout: yield* positiveDuration("connectTimeout", input.connectTimeout ?? "10 seconds"),
      idleTimeout: yield* positiveDuration("idleTimeout", input.idleTimeout ?? "30 seconds"),
      applicationName
    }
  })

/** Everything `Durable.layerConfig` reads, with defaults and descriptions. */
export const config: Config.Config<{
  readonly connection: ConnectionInput
  readonly settings: SettingsInput
  readonly outbox: { readonly maxPayloadBytes: number; readonly maxAttempts: number }
}> = Config
  .all({
    outbox: Config.all({
      maxPayloadBytes: Config.integer("DURABLE_OUTBOX_MAX_PAYLOAD_BYTES").pipe(
        Config.withDefault(256 * 1024),
        Config.withDescription("largest outbox payload, as canonical JSON bytes")
      ),
      maxAttempts: Config.integer("DURABLE_OUTBOX_MAX_ATTEMPTS").pipe(
        Config.withDefault(25),
        Config.withDescription("deliveries before an outbox message is dead")
      )
    }),
    connection: Config.all({
      url: Config.redacted("DATABASE_URL").pipe(Config.withDescription("PostgreSQL URL")),
      poolSize: Config.integer("DURABLE_POOL_SIZE").pipe(
        Config.withDefault(10),
        Config.withDescription("most connections in the pool")
      ),
      connectTimeout: Config.duration("DURABLE_CONNECT_TIMEOUT").pipe(
        Config.withDefault(Duration.seconds(10)),
        Config.withDescription("longest wait to open or acquire a connection")
      ),
      idleTimeout: Config.duration("DURABLE_IDLE_TIMEOUT").pipe(
        Config.withDefault(Duration.seconds(30)),
        Config.withDescription("how long an unused connection stays open")
      ),
      applicationName: Config.string("DURABLE_APPLICATION_NAME").pipe(
        Config.withDefault("effect-durable"),
        Config.withDescription("application_name shown in pg_stat_activity")
      )
    }),
    settings: Config.all({
      schema: Config.string("DURABLE_SCHEMA").pipe(
        Config.withDefault("durable"),
        Config.withDescription("schema of the substrate tables")
      ),
      lockTimeout: Config.duration("DURABLE_LOCK_TIMEOUT").pipe(
        Config.withDefault(Duration.seconds(5)),
        Config.withDescription("longest lock wait inside a substrate transaction")
      ),
      statementTimeout: Config.option(Config.duration("DURABLE_STATEMENT_TIMEOUT")).pipe(
        Config.withDescription("longest statement inside a substrate transaction (default: the server's)")
      )
    }).pipe(Config.map(({ statementTimeout, ...rest }) =>
      Option.isSome(statementTimeout) ? { ...rest, statementTimeout: statementTimeout.value } : rest
    ))
  })

/** Reports a configuration that could not be read (missing, not a number...) with its path. */
export const fromConfigError = (error: ConfigError.ConfigError): DurableConfigError => {
  const leaf = (e: ConfigError.ConfigError): { path: ReadonlyArray<string>; message: string } => {
    switch (e._op) {
      case "And":
      case "Or":
        return leaf(e.left)
      case "InvalidData":
      case "MissingData":
      case "SourceUnavailable":
      case "Unsupported":
        return { path: e.path, message: e.message }
    }
  }
  const { message, path } = leaf(error)
  return new DurableConfigError({ field: path.join(".") || "config", rule: message })
}
