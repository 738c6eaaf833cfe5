/**
 * A separate login role on the suite's database, for least-privilege tests: the suite
 * grants it exactly what it needs (as the superuser) and runs statements through the
 * role's own `SqlClient`. The role and its privileges are dropped when the scope closes.
 *
 * @since 0.1.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Effect from "effect/Effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import type * as SqlClient from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import { randomBytes } from "node:crypto"
import { quoteIdentifier, uniqueSuffix, withAdmin } from "./internal/admin.js"
import type { PgServerError } from "./PgServer.js"
import { isPooled, liveClock, TestDatabase } from "./TestDatabase.js"

export interface TestRole {
  /** The role's actual (unique) name: `<base>_<suffix>`. */
  readonly name: string
  /** A client connected to the suite's database as this role. */
  readonly sql: SqlClient.SqlClient
}

/** Creates a login role that can connect to the suite's database and nothing more. */
export const make = (
  base: string,
  options: { readonly applicationName?: string } = {}
): Effect.Effect<TestRole, PgServerError | SqlError, TestDatabase | Scope.Scope> =>
  Effect.gen(function*() {
    const database = yield* TestDatabase
    const { server } = database
    const name = `${base}_${uniqueSuffix()}`
    const password = randomBytes(12).toString("hex")
    yield* Effect.acquireRelease(
      withAdmin(database.url, server.provider, (client) =>
        client.query(
          `CREATE ROLE ${quoteIdentifier(name)} LOGIN NOINHERIT PASSWORD '${password}';
           GRANT CONNECT ON DATABASE ${quoteIdentifier(database.name)} TO ${quoteIdentifier(name)}`
        )),
      () =>
        Effect.orDie(
          withAdmin(
            database.url,
            server.provider,
            (client) => client.query(`DROP OWNED BY ${quoteIdentifier(name)}; DROP ROLE ${quoteIdentifier(name)}`)
          )
        )
    )
    // The role's client goes where the suite's pool goes (through the pooler, when there is one).
    const url = new URL(Redacted.value(database.poolUrl))
    url.username = name
    url.password = password
    const sql = yield* PgClient.make({
      url: Redacted.make(url.toString()),
      applicationName: options.applicationName ?? name,
      maxConnections: 4,
      prepare: !isPooled(database)
    }).pipe(Effect.provide([Reactivity.layer, liveClock]))
    return { name, sql }
  })
