import { describe, expect, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import pg from "pg"
import * as Redacted from "effect/Redacted"
import * as PgServer from "../src/PgServer.js"
import * as TestDatabase from "../src/TestDatabase.js"

const databaseExists = (name: string) =>
  Effect.flatMap(PgServer.PgServer, (server) =>
    Effect.promise(async () => {
      const client = new pg.Client({ connectionString: Redacted.value(server.url()) })
      await client.connect()
      try {
        const result = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [name])
        return result.rowCount === 1
      } finally {
        await client.end()
      }
    }))

describe("TestDatabase", () => {
  it.effect("gives each suite a fresh, empty database of its own that is dropped on release", () =>
    Effect.gen(function*() {
      const seen = yield* Effect.scoped(
        Effect.gen(function*() {
          const a = yield* Layer.build(TestDatabase.layer({ prefix: "ed_iso" }))
          const b = yield* Layer.build(TestDatabase.layer({ prefix: "ed_iso" }))
          const sqlA = a.unsafeMap.get(SqlClient.SqlClient.key) as SqlClient.SqlClient
          const sqlB = b.unsafeMap.get(SqlClient.SqlClient.key) as SqlClient.SqlClient
          const nameA = (yield* sqlA<{ name: string }>`SELECT current_database() AS name`)[0]!.name
          const nameB = (yield* sqlB<{ name: string }>`SELECT current_database() AS name`)[0]!.name
          expect(nameA).not.toBe(nameB)
          const tables = yield* sqlA<{ n: string }>`SELECT count(*)::text AS n FROM pg_tables WHERE schemaname = 'public'`
          expect(tables[0]!.n).toBe("0")
          yield* sqlA`CREATE TABLE visible_only_here (id int)`
          yield* sqlA`INSERT INTO visible_only_here VALUES (1)`
          const inB = yield* sqlB<{ t: string | null }>`SELECT to_regclass('visible_only_here')::text AS t`
          expect(inB[0]!.t).toBeNull()
          expect(yield* databaseExists(nameA)).toBe(true)
          return [nameA, nameB] as const
        })
      )
      expect(yield* databaseExists(seen[0])).toBe(false)
      expect(yield* databaseExists(seen[1])).toBe(false)
    }).pipe(Effect.provide(PgServer.layer)))

  it.effect("shares the run's embedded server unless DATABASE_URL names one", () =>
    Effect.gen(function*() {
      const server = yield* PgServer.PgServer
      const { databaseUrl } = yield* PgServer.ProviderConfig
      // Not owned: the vitest global setup started it once for every suite of the run.
      expect(server.owned).toBe(false)
      expect(server.provider).toBe(databaseUrl._tag === "Some" ? "url" : "embedded")
    }).pipe(Effect.provide(PgServer.layer)))

  it.effect("runs on a real PostgreSQL 14 or newer", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const [row] = yield* sql<{ version: number }>`SELECT current_setting('server_version_num')::int AS version`
      expect(row!.version).toBeGreaterThanOrEqual(140000)
    }).pipe(Effect.provide(TestDatabase.layerFresh())))
})
