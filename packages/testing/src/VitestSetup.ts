/**
 * Vitest global setup: one embedded PostgreSQL for the whole run, shared with every test
 * worker through `EFFECT_DURABLE_TEST_SERVER_URL`. Skipped when `DATABASE_URL` or another
 * provider is configured. Several projects may list this setup; the first starts the
 * server, the last teardown stops it.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import { type EmbeddedServer, startEmbedded } from "./internal/embedded.js"
import { ProviderConfig, SHARED_SERVER_VARIABLE } from "./PgServer.js"

interface Shared {
  users: number
  server: Promise<EmbeddedServer> | undefined
}

const shared: Shared = ((globalThis as any)[Symbol.for("@effect-durable/testing/shared-server")] ??= {
  users: 0,
  server: undefined
})

export default async function setup(): Promise<() => Promise<void>> {
  const config = await Effect.runPromise(ProviderConfig)
  if (config.databaseUrl._tag === "Some" || config.provider !== "embedded") return async () => {}
  shared.users += 1
  shared.server ??= startEmbedded()
  const server = await shared.server
  process.env[SHARED_SERVER_VARIABLE] =
    `postgres://${server.user}:${server.password}@${server.host}:${server.port}/postgres`
  return async () => {
    shared.users -= 1
    if (shared.users === 0 && shared.server !== undefined) {
      const stopping = shared.server
      shared.server = undefined
      delete process.env[SHARED_SERVER_VARIABLE]
      await (await stopping).stop()
    }
  }
}
