/**
 * The application's development database: an embedded PostgreSQL whose data lives in the
 * project (`.effect-durable/postgres` by default), with durability on, reused across
 * restarts. A scoped Layer starts it and stops it (a fast shutdown); it logs its URL. One
 * process owns a directory at a time: a second one fails with `DevDatabaseLocked`.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { resolve } from "node:path"
import { acquire, type Started } from "./internal/devServer.js"
import { LockHeld } from "./internal/lock.js"

/** Where the data lives unless told otherwise, relative to the working directory. */
export const DEFAULT_DIRECTORY = ".effect-durable/postgres"

/** Another process owns this development database (another app, or a second copy of this one). */
export class DevDatabaseLocked
  extends Schema.TaggedError<DevDatabaseLocked>("@effect-durable/embedded/DevDatabaseLocked")(
    "DevDatabaseLocked",
    { directory: Schema.String, pid: Schema.Number }
  )
{
  override get message() {
    return `the development database in ${this.directory} is in use by process ${this.pid} (another app in this folder, ` +
      `or this one started twice): stop that process, or give this app a directory of its own (the "directory" option of DevDatabase.layer)`
  }
}

/** The development database could not be prepared, started or stopped. */
export class DevDatabaseError extends Schema.TaggedError<DevDatabaseError>("@effect-durable/embedded/DevDatabaseError")(
  "DevDatabaseError",
  { directory: Schema.String, reason: Schema.String }
) {
  override get message() {
    return `development database in ${this.directory}: ${this.reason}`
  }
}

export class DevDatabase extends Context.Service<DevDatabase, {
  /** A superuser URL (`postgres` role, `postgres` database) on 127.0.0.1. */
  readonly url: Redacted.Redacted<string>
  readonly port: number
  /** The absolute directory that holds the data (`data/`), the settings and the lock. */
  readonly directory: string
  /** Whether this start created the database (an empty cluster); false when it was reused. */
  readonly created: boolean
}>()("@effect-durable/embedded/DevDatabase") {}

export interface Options {
  /** Where the data lives. Default `.effect-durable/postgres` under the working directory. */
  readonly directory?: string
  /**
   * The port on 127.0.0.1. Default: the port of the last start when it is free, otherwise a
   * free one (remembered for the next start).
   */
  readonly port?: number
  /** Server settings (`-c name=value`); `fsync` and the other durability settings stay on unless set here. */
  readonly settings?: Readonly<Record<string, string>>
}

const toError = (directory: string) => (error: unknown): DevDatabaseError | DevDatabaseLocked =>
  error instanceof LockHeld
    ? new DevDatabaseLocked({ directory, pid: error.pid })
    : new DevDatabaseError({ directory, reason: error instanceof Error ? error.message : String(error) })

/** Starts (creating it on first use) the development database; stops it when the scope closes. */
export const make = (
  options: Options = {}
): Effect.Effect<DevDatabase["Service"], DevDatabaseError | DevDatabaseLocked, Scope.Scope> =>
  Effect.gen(function*() {
    const directory = yield* Effect.sync(() => resolve(options.directory ?? DEFAULT_DIRECTORY))
    const started: Started = yield* Effect.acquireRelease(
      Effect.tryPromise({ try: () => acquire(directory, options), catch: toError(directory) }),
      (server) => Effect.promise(() => server.stop())
    )
    const url = `postgres://postgres:${encodeURIComponent(started.password)}@127.0.0.1:${started.port}/postgres`
    yield* Effect.logInfo(
      `development database ${started.created ? "created" : "started"}: ${url} (data in ${started.directory})`
    )
    return DevDatabase.of({
      url: Redacted.make(url),
      port: started.port,
      directory: started.directory,
      created: started.created
    })
  })

/** The development database as a service: `DevDatabase.url` for your `PgClient` or `Durable.layer`. */
export const layer = (options: Options = {}): Layer.Layer<DevDatabase, DevDatabaseError | DevDatabaseLocked> =>
  Layer.effect(DevDatabase, make(options))

/**
 * `DATABASE_URL` for everything that reads configuration (`Durable.layerConfig()`): the
 * variable itself when it is set (production, CI), otherwise the development database,
 * started for the lifetime of the layer:
 *
 *     Durable.layerConfig({ migrate: true }).pipe(Layer.provide(DevDatabase.layerDatabaseUrl()))
 */
export const layerDatabaseUrl = (options: Options = {}): Layer.Layer<never, DevDatabaseError | DevDatabaseLocked> =>
  Layer.unwrap(
    Effect.gen(function*() {
      const configured = yield* Effect.orElseSucceed(
        Config.option(Config.Redacted("DATABASE_URL")),
        () => Option.none()
      )
      if (Option.isSome(configured)) return Layer.empty
      const database = yield* make(options)
      // Added behind the current provider: it only answers what the application left unset.
      return ConfigProvider.layerAdd(ConfigProvider.fromEnvRecord({ DATABASE_URL: Redacted.value(database.url) }))
    })
  )
