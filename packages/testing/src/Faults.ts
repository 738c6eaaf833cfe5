/**
 * Fault tools for crash and recovery tests: cut the connections of a named client,
 * restart the server under a running suite.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import { withAdmin } from "./internal/admin.js"
import { PgServer, type PgServerError } from "./PgServer.js"

/** Terminates every backend whose `application_name` matches; returns how many it ended. */
export const terminateBackends = (applicationName: string): Effect.Effect<number, PgServerError, PgServer> =>
  Effect.flatMap(PgServer, (server) =>
    withAdmin(server.url(), server.provider, async (client) => {
      const result = await client.query<{ terminated: boolean }>(
        `SELECT pg_terminate_backend(pid) AS terminated FROM pg_stat_activity
          WHERE application_name = $1 AND pid <> pg_backend_pid()`,
        [applicationName]
      )
      return result.rows.filter((row) => row.terminated).length
    }))

/** Fast shutdown and start of a server this test owns (see `PgServer.layerEmbedded`). */
export const restartServer: Effect.Effect<void, PgServerError, PgServer> = Effect.flatMap(
  PgServer,
  (server) => server.restart
)
