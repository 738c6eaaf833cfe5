/**
 * A fresh database per test suite on the run's PostgreSQL server, with a `SqlClient`
 * (`@effect/sql-pg`) connected to it as a superuser. Suites never see each other's rows, so
 * they run in parallel; the database is dropped (with its connections) when the scope closes.
 * With `EFFECT_DURABLE_TEST_POOLER_URL` set (a PgBouncer in transaction mode in front of the
 * same server, see scripts/pgbouncer.sh), the suite's pools go through the pooler while the
 * admin statements (create and drop databases and roles) stay direct.
 *
 * @since 0.1.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import type * as SqlClient from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import { quoteIdentifier, uniqueSuffix, withAdmin } from "./internal/admin.js"
import * as PgServer from "./PgServer.js"

export class TestDatabase extends Context.Service<TestDatabase, {
  readonly name: string
  /** A superuser URL for this database, direct to the server. */
  readonly url: Redacted.Redacted<string>
  /** The URL the suite's pools use: through the pooler when one is configured, else `url`. */
  readonly poolUrl: Redacted.Redacted<string>
  readonly server: PgServer.PgServer["Service"]
}>()("@effect-durable/testing/TestDatabase") {}

/**
 * Whether the suite's pools go through a pooler. A transaction pooler cannot carry a
 * `LISTEN`: a test that listens then listens on `url`, direct.
 */
export const isPooled = (database: TestDatabase["Service"]): boolean =>
  Redacted.value(database.poolUrl) !== Redacted.value(database.url)

/** Name of the variable that routes the suites' pools through a pooler. */
export const POOLER_VARIABLE = "EFFECT_DURABLE_TEST_POOLER_URL"

/**
 * The pooler in front of the run's server, read through Effect `Config` (environment by
 * default): a superuser URL of a pooler (PgBouncer, transaction mode) in front of the
 * DATABASE_URL server; the suites' pools connect through it.
 */
export const PoolerConfig = Config.option(Config.Redacted(POOLER_VARIABLE))

/** `base` (a pooler's URL) pointing at database `name`. */
const onDatabase = (base: Redacted.Redacted<string>, name: string): Redacted.Redacted<string> => {
  const url = new URL(Redacted.value(base))
  url.pathname = `/${encodeURIComponent(name)}`
  return Redacted.make(url.toString())
}

export interface Options {
  /** Prefix of the generated database name (lowercase letters, digits, `_`). */
  readonly prefix?: string
  /** `application_name` of the suite's pool, so fault tools can find its backends. */
  readonly applicationName?: string
  readonly maxConnections?: number
}

/** Creates the database (from `template0`: nobody is ever connected to it) and drops it on release. */
export const make = (
  options: Options = {}
): Effect.Effect<TestDatabase["Service"], PgServer.PgServerError, PgServer.PgServer | Scope.Scope> =>
  Effect.gen(function*() {
    const server = yield* PgServer.PgServer
    const pooler = yield* Effect.mapError(
      PoolerConfig,
      (error) => new PgServer.PgServerError({ provider: "config", reason: String(error) })
    )
    const name = `${options.prefix ?? "ed_test"}_${uniqueSuffix()}`
    yield* Effect.acquireRelease(
      withAdmin(
        server.url(),
        server.provider,
        (client) => client.query(`CREATE DATABASE ${quoteIdentifier(name)} TEMPLATE template0 ENCODING 'UTF8'`)
      ),
      () =>
        Effect.orDie(
          withAdmin(server.url(), server.provider, (client) =>
            client.query(`DROP DATABASE IF EXISTS ${quoteIdentifier(name)} WITH (FORCE)`))
        )
    )
    const url = server.url(name)
    return TestDatabase.of({
      name,
      url,
      poolUrl: Option.match(pooler, { onNone: () => url, onSome: (base) => onDatabase(base, name) }),
      server
    })
  })

/**
 * The real clock, for the pool: its connect and idle timeouts are real time even in a test
 * that drives its own time with `TestClock` (a pool on the test clock would never time out).
 */
export const liveClock: Layer.Layer<never> = Layer.succeed(Clock.Clock, Clock.Clock.defaultValue())

/** The suite's database and a superuser `PgClient` / `SqlClient` on it, over a given server. */
export const layer = (
  options: Options = {}
): Layer.Layer<
  TestDatabase | PgClient.PgClient | SqlClient.SqlClient,
  PgServer.PgServerError | SqlError,
  PgServer.PgServer
> =>
  Layer.flatMap(Layer.effect(TestDatabase, make(options)), (context) => {
    const database = Context.get(context, TestDatabase)
    return Layer.merge(
      Layer.succeedContext(context),
      PgClient.layer({
        url: database.poolUrl,
        applicationName: options.applicationName ?? "effect-durable-test",
        maxConnections: options.maxConnections ?? 10,
        // A transaction pooler moves named prepared statements between server connections.
        prepare: !isPooled(database)
      }).pipe(Layer.provide(liveClock))
    )
  })

/** `layer` over the server chosen by configuration: what a test suite usually wants. */
export const layerFresh = (
  options: Options = {}
): Layer.Layer<
  TestDatabase | PgServer.PgServer | PgClient.PgClient | SqlClient.SqlClient,
  PgServer.PgServerError | SqlError
> => layer(options).pipe(Layer.provideMerge(PgServer.layer))
