/**
 * `npm start`: starts an embedded PostgreSQL, shows that it answers, prints the package
 * map, and stops it cleanly (also on Ctrl-C). The projector issue turns this into the demo
 * service of examples/jobs.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as PgServer from "@effect-durable/testing/PgServer"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"

const packages: ReadonlyArray<readonly [string, string]> = [
  ["@effect-durable/core", "pure: RFC 8785 fingerprints, signed keyset cursors, typed errors"],
  ["@effect-durable/testing", "a scoped real PostgreSQL per test run, a fresh database per suite, fault tools"],
  ["@effect-durable/pg", "(next) migrations, mutation ledger, outbox, inbox, CAS, keyset pages"],
  ["@effect-durable/projector", "(next) the delivery fiber and its Publisher"],
  ["@effect-durable/nats", "(next) NATS JetStream publisher and inbox consumer"],
  ["@effect-durable/cli", "(next) migrate, status, dead letters, purge, verify"]
]

const program = Effect.gen(function*() {
  const server = yield* PgServer.PgServer
  const database = yield* TestDatabase.TestDatabase
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ version: string; now: string }>`SELECT version() AS version, now()::text AS now`
  yield* Console.log(`PostgreSQL (${server.provider}) answers from database ${database.name}:`)
  yield* Console.log(`  ${row!.version}`)
  yield* Console.log(`  database clock: ${row!.now}`)
  yield* Console.log(`  data directory: ${Option.getOrElse(server.dataDir, () => "(not on this machine)")}`)
  yield* Console.log("\neffect-durable packages:")
  for (const [name, role] of packages) yield* Console.log(`  ${name.padEnd(28)} ${role}`)
  yield* Console.log("\nstopping PostgreSQL...")
})

const Live = TestDatabase.layer({ prefix: "ed_start", applicationName: "effect-durable-start" }).pipe(
  Layer.provideMerge(PgServer.layer)
)

NodeRuntime.runMain(
  program.pipe(
    Effect.provide(Live),
    Effect.tap(() => Console.log("stopped cleanly."))
  )
)
