/**
 * A real PostgreSQL server for tests, as a scoped resource. Providers, first match wins:
 * `DATABASE_URL`; `EFFECT_DURABLE_TEST_PG=testcontainers` (opt-in, needs a Docker engine);
 * the embedded server the vitest global setup shares with the whole run; otherwise an
 * embedded server of this scope's own. Whatever this scope started, it stops and deletes.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { type EmbeddedOptions, startEmbedded } from "./internal/embedded.js"

export type { EmbeddedOptions } from "./internal/embedded.js"

export type Provider = "url" | "embedded" | "testcontainers"

export interface RestartOptions {
  /**
   * `fast` (default): open transactions roll back and the server shuts down cleanly.
   * `immediate`: every server process quits at once, as in a crash; the start runs crash
   * recovery. Only the embedded server does it. Its test settings turn `synchronous_commit`
   * off, so commits acknowledged in the last moments before an immediate stop may be lost (as
   * on any server so configured): start it with `synchronous_commit: "on"` to test durability.
   */
  readonly mode?: "fast" | "immediate"
  /** How long the server stays down between stop and start. Default none. */
  readonly downtime?: Duration.Input
}

/** The server could not be started, reached or driven. */
export class PgServerError extends Schema.TaggedError<PgServerError>("@effect-durable/testing/PgServerError")(
  "PgServerError",
  { provider: Schema.String, reason: Schema.String }
) {
  override get message() {
    return `PostgreSQL (${this.provider}): ${this.reason}`
  }
}

export class PgServer extends Context.Service<PgServer, {
  readonly provider: Provider
  /** Whether this scope started the server (and may therefore restart it). */
  readonly owned: boolean
  /** A superuser URL for the given database (the maintenance database by default). */
  readonly url: (database?: string) => Redacted.Redacted<string>
  /** The embedded server's data directory, when there is one. */
  readonly dataDir: Option.Option<string>
  /** The postmaster's pid, when this machine runs it. */
  readonly postmasterPid: Effect.Effect<Option.Option<number>>
  /** Fast shutdown and start on the same port and data; only for a server this scope owns. */
  readonly restart: Effect.Effect<void, PgServerError>
  /** `restart` with a shutdown mode and a downtime. */
  readonly restartWith: (options: RestartOptions) => Effect.Effect<void, PgServerError>
}>()("@effect-durable/testing/PgServer") {}

/** Name of the variable through which the vitest global setup shares its server. */
export const SHARED_SERVER_VARIABLE = "EFFECT_DURABLE_TEST_SERVER_URL"

const withDatabase = (url: string, database: string | undefined): Redacted.Redacted<string> => {
  if (database === undefined) return Redacted.make(url)
  const parsed = new URL(url)
  parsed.pathname = `/${encodeURIComponent(database)}`
  return Redacted.make(parsed.toString())
}

const cannotRestart = (provider: Provider) =>
  Effect.fail(new PgServerError({ provider, reason: "restart needs a server this test owns (PgServer.layerEmbedded)" }))

/** A server someone else runs, reached by URL. */
export const layerUrl = (url: Redacted.Redacted<string>, provider: Provider = "url"): Layer.Layer<PgServer> =>
  Layer.succeed(
    PgServer,
    PgServer.of({
      provider,
      owned: false,
      url: (database) => withDatabase(Redacted.value(url), database),
      dataDir: Option.none(),
      postmasterPid: Effect.succeed(Option.none()),
      restart: cannotRestart(provider),
      restartWith: () => cannotRestart(provider)
    })
  )

/** An embedded PostgreSQL owned by this scope: started on acquire, stopped and deleted on release. */
export const layerEmbedded = (options: EmbeddedOptions = {}): Layer.Layer<PgServer, PgServerError> =>
  Layer.effect(
    PgServer,
    Effect.map(
      Effect.acquireRelease(
        Effect.tryPromise({
          try: () => startEmbedded(options),
          catch: (error) => new PgServerError({ provider: "embedded", reason: String(error) })
        }),
        (server) => Effect.promise(() => server.stop())
      ),
      (server) => {
        const base = `postgres://${server.user}:${server.password}@${server.host}:${server.port}/postgres`
        const restartWith = (options: RestartOptions) =>
          Effect.tryPromise({
            try: () =>
              server.restart({
                immediate: options.mode === "immediate",
                downtimeMillis: options.downtime === undefined ? 0 : Duration.toMillis(options.downtime)
              }),
            catch: (error) => new PgServerError({ provider: "embedded", reason: `restart failed: ${String(error)}` })
          })
        return PgServer.of({
          provider: "embedded",
          owned: true,
          url: (database) => withDatabase(base, database),
          dataDir: Option.some(server.dataDir),
          postmasterPid: Effect.sync(() => Option.fromNullishOr(server.postmasterPid())),
          restart: restartWith({}),
          restartWith
        })
      }
    )
  )

/**
 * testcontainers' PostgreSQL module. Asks the container runtime first, so a machine without
 * a Docker engine fails at once with a message that says so instead of hanging.
 */
export const layerTestcontainers = (image = "postgres:18-alpine"): Layer.Layer<PgServer, PgServerError> =>
  Layer.effect(
    PgServer,
    Effect.gen(function*() {
      const fail = (reason: string) => new PgServerError({ provider: "testcontainers", reason })
      const modules = yield* Effect.tryPromise({
        try: () => Promise.all([import("@testcontainers/postgresql"), import("testcontainers")]),
        catch: () => fail("install @testcontainers/postgresql to use this provider")
      })
      const [{ PostgreSqlContainer }, { getContainerRuntimeClient }] = modules
      yield* Effect.tryPromise({
        try: () => getContainerRuntimeClient(),
        catch: (error) =>
          fail(
            `no container runtime: a Docker engine is needed for EFFECT_DURABLE_TEST_PG=testcontainers (${
              error instanceof Error ? error.message : String(error)
            })`
          )
      }).pipe(Effect.timeoutOrElse({
        duration: "20 seconds",
        orElse: () => Effect.fail(fail("the container runtime did not answer in 20 s"))
      }))
      const container = yield* Effect.acquireRelease(
        Effect.tryPromise({
          try: () => new PostgreSqlContainer(image).start(),
          catch: (error) => fail(String(error))
        }),
        (started) => Effect.promise(() => started.stop())
      )
      const uri = container.getConnectionUri()
      const restart = Effect.tryPromise({
        try: () => container.restart(),
        catch: (error) => fail(`restart failed: ${String(error)}`)
      })
      return PgServer.of({
        provider: "testcontainers",
        owned: true,
        url: (database) => withDatabase(uri, database),
        dataDir: Option.none(),
        postmasterPid: Effect.succeed(Option.none()),
        restart,
        restartWith: (options) =>
          options.mode === "immediate" || options.downtime !== undefined
            ? Effect.fail(fail("an immediate restart or a downtime needs the embedded server (PgServer.layerEmbedded)"))
            : restart
      })
    })
  )

/** The settings that choose a provider, read through Effect `Config` (environment by default). */
export const ProviderConfig = Config.all({
  databaseUrl: Config.option(Config.Redacted("DATABASE_URL")),
  provider: Config.Literals(["embedded", "testcontainers"], "EFFECT_DURABLE_TEST_PG").pipe(
    Config.withDefault("embedded" as const)
  ),
  shared: Config.option(Config.Redacted(SHARED_SERVER_VARIABLE))
})

/** The provider chosen by configuration (see the module comment for the order). */
export const layer: Layer.Layer<PgServer, PgServerError> = Layer.unwrap(
  Effect.map(
    Effect.mapError(ProviderConfig, (error) => new PgServerError({ provider: "config", reason: String(error) })),
    ({ databaseUrl, provider, shared }): Layer.Layer<PgServer, PgServerError> =>
      Option.isSome(databaseUrl)
        ? layerUrl(databaseUrl.value)
        : provider === "testcontainers"
        ? layerTestcontainers()
        : Option.isSome(shared)
        ? layerUrl(shared.value, "embedded")
        : layerEmbedded()
  )
)
