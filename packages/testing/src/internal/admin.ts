/**
 * Superuser statements the test resource issues around the code under test (create and
 * drop databases and roles, terminate backends). They run on a short-lived `pg` client of
 * their own so they never borrow from, or wait behind, the pool a test is exercising.
 */
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import pg from "pg"
import { PgServerError } from "../PgServer.js"

export const withAdmin = <A>(
  url: Redacted.Redacted<string>,
  provider: string,
  use: (client: pg.Client) => Promise<A>
): Effect.Effect<A, PgServerError> =>
  Effect.tryPromise({
    try: async () => {
      const client = new pg.Client({
        connectionString: Redacted.value(url),
        application_name: "effect-durable-testing",
        connectionTimeoutMillis: 30_000
      })
      // An admin connection the server terminates (a restart test) must not crash the process.
      client.on("error", () => undefined)
      await client.connect()
      try {
        return await use(client)
      } finally {
        await client.end().catch(() => undefined)
      }
    },
    catch: (error) => new PgServerError({ provider, reason: error instanceof Error ? error.message : String(error) })
  })

/** A double-quoted identifier; the names we quote are generated, this is defence in depth. */
export const quoteIdentifier = (name: string): string => `"${name.replace(/"/g, `""`)}"`

/** A short random suffix for names that must be unique on a shared server. */
export const uniqueSuffix = (): string =>
  `${process.pid.toString(36)}_${Math.floor(Math.random() * 36 ** 6).toString(36).padStart(6, "0")}`
