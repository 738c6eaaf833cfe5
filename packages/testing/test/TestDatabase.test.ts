import { describe, expect, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { connect, createServer, type Socket } from "node:net"
import pg from "pg"
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
          const sqlA = Context.get(a, SqlClient.SqlClient)
          const sqlB = Context.get(b, SqlClient.SqlClient)
          const nameA = (yield* sqlA<{ name: string }>`SELECT current_database() AS name`)[0]!.name
          const nameB = (yield* sqlB<{ name: string }>`SELECT current_database() AS name`)[0]!.name
          expect(nameA).not.toBe(nameB)
          const tables = yield* sqlA<
            { n: string }
          >`SELECT count(*)::text AS n FROM pg_tables WHERE schemaname = 'public'`
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

  it.effect("routes the suite's pool through the configured pooler while admin statements stay direct", () =>
    Effect.gen(function*() {
      const server = yield* PgServer.PgServer
      const direct = new URL(Redacted.value(server.url()))
      // A stand-in pooler: a TCP relay to the server that remembers the ports of its upstream connections.
      const relay = yield* Effect.acquireRelease(
        Effect.callback<{ port: number; upstreamPorts: () => Array<number>; close: () => void }>((resume) => {
          const sockets = new Set<Socket>()
          const upstreamPorts: Array<number> = []
          const listener = createServer((client) => {
            const upstream = connect(Number(direct.port), direct.hostname)
            upstream.on("connect", () => upstreamPorts.push(upstream.localPort!))
            for (const socket of [client, upstream]) {
              sockets.add(socket)
              socket.on("error", () => undefined)
              socket.on("close", () => sockets.delete(socket))
            }
            client.pipe(upstream).pipe(client)
          })
          listener.listen(0, "127.0.0.1", () => {
            const address = listener.address()
            resume(Effect.succeed({
              port: typeof address === "object" && address !== null ? address.port : 0,
              upstreamPorts: () => upstreamPorts,
              close: () => {
                for (const socket of sockets) socket.destroy()
                listener.close()
              }
            }))
          })
        }),
        (relay) => Effect.sync(relay.close)
      )
      const pooler = new URL(direct)
      pooler.port = String(relay.port)
      {
        const context = yield* Layer.build(TestDatabase.layer({ prefix: "ed_pooled" })).pipe(
          Effect.provideService(
            ConfigProvider.ConfigProvider,
            ConfigProvider.fromEnvRecord({ [TestDatabase.POOLER_VARIABLE]: pooler.toString() })
          )
        )
        const database = Context.get(context, TestDatabase.TestDatabase)
        const sql = Context.get(context, SqlClient.SqlClient)
        expect(new URL(Redacted.value(database.url)).port).toBe(direct.port)
        const expected = new URL(pooler)
        expected.pathname = `/${database.name}`
        expect(Redacted.value(database.poolUrl)).toBe(expected.toString())
        // The pool's connection runs through the relay: the server sees the relay's upstream port.
        const [row] = yield* sql<{ name: string; port: number }>`
          SELECT current_database() AS name, inet_client_port() AS port`
        expect(row!.name).toBe(database.name)
        expect(relay.upstreamPorts()).toContain(row!.port)
      }
    }).pipe(Effect.scoped, Effect.provide(PgServer.layer)))
})
