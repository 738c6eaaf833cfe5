import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import * as Faults from "../src/Faults.js"
import * as PgServer from "../src/PgServer.js"
import * as TestDatabase from "../src/TestDatabase.js"

const backendPid = Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`)
  .pipe(Effect.map((rows) => rows[0]!.pid))

describe("Faults.terminateBackends", () => {
  it.layer(TestDatabase.layerFresh({ applicationName: "faults-victim", maxConnections: 1 }))((it) => {
    it.effect("ends the backends of one application_name and only those", () =>
      Effect.gen(function*() {
        const before = yield* backendPid
        const terminated = yield* Faults.terminateBackends("faults-victim")
        expect(terminated).toBe(1)
        // The pool replaces the dead connection; a new backend answers.
        const after = yield* backendPid.pipe(Effect.retry({ times: 3 }))
        expect(after).not.toBe(before)
        expect(yield* Faults.terminateBackends("no-such-application")).toBe(0)
      }))
  })
})

describe("Faults.restartServer", () => {
  const ownServer = TestDatabase.layer({ applicationName: "restart-test" }).pipe(
    Layer.provideMerge(PgServer.layerEmbedded())
  )
  it.layer(ownServer, { timeout: "120 seconds" })((it) => {
    it.effect(
      "restarts a server this test owns; committed rows survive and clients reconnect",
      () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const server = yield* PgServer.PgServer
          yield* sql`CREATE TABLE survivors (id int)`
          yield* sql`INSERT INTO survivors VALUES (1), (2)`
          const postmasterBefore = Option.getOrThrow(yield* server.postmasterPid)
          yield* Faults.restartServer
          const postmasterAfter = Option.getOrThrow(yield* server.postmasterPid)
          expect(postmasterAfter).not.toBe(postmasterBefore)
          const rows = yield* sql<{ id: number }>`SELECT id FROM survivors ORDER BY id`.pipe(
            Effect.retry({ times: 5 })
          )
          expect(rows.map((row) => row.id)).toEqual([1, 2])
          yield* PgClient.PgClient
        }),
      120_000
    )
  })
})

describe("PgServer restartWith immediate", () => {
  // The test defaults turn synchronous_commit off (a commit is acknowledged before its WAL is
  // written): an immediate stop loses the last moments. Durability is tested with it on.
  const crashServer = TestDatabase.layer({ applicationName: "crash-test" }).pipe(
    Layer.provideMerge(PgServer.layerEmbedded({ settings: { synchronous_commit: "on" } }))
  )
  it.layer(crashServer, { timeout: "120 seconds" })((it) => {
    it.effect(
      "an immediate restart (a crash) keeps every committed row; the server comes back after its downtime",
      () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const server = yield* PgServer.PgServer
          yield* sql`CREATE TABLE crash_survivors (id int)`
          yield* sql`INSERT INTO crash_survivors SELECT generate_series(1, 1000)`
          const started = Date.now()
          yield* server.restartWith({ mode: "immediate", downtime: "1 second" })
          expect(Date.now() - started).toBeGreaterThanOrEqual(1000)
          const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crash_survivors`.pipe(
            Effect.retry({ times: 5 })
          )
          expect(rows[0]!.n).toBe(1000)
        }).pipe(TestClock.withLive),
      120_000
    )
  })
})
