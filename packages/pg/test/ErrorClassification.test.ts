import { DatabaseError } from "@effect-durable/core/Errors"
import * as Faults from "@effect-durable/testing/Faults"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Reactivity from "effect/reactivity/Reactivity"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { classify, classifySqlErrors, isSessionFailure } from "../src/ErrorClassification.js"
import * as MutationLedger from "../src/MutationLedger.js"
import { substrate } from "./support.js"

const run = <A, R>(statement: Effect.Effect<A, unknown, R>) =>
  Effect.flip(classifySqlErrors("test")(statement as Effect.Effect<A, never, R>)) as Effect.Effect<
    DatabaseError,
    never,
    R
  >

const Live = Layer.effectDiscard(
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all([
      sql`CREATE TABLE uniq (id int PRIMARY KEY)`,
      sql`CREATE TABLE deferred_uniq (id int, CONSTRAINT deferred_uniq_id UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)`,
      sql`CREATE TABLE written (id int)`
    ], { discard: true }))
).pipe(Layer.provideMerge(substrate()))

describe("PostgreSQL errors are classified in one place", () => {
  it.layer(Live)((it) => {
    it.effect("no session (unreachable, authentication, no such database) is told apart from a failed statement", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // A statement that failed on a live session is not a session failure.
        expect(isSessionFailure(yield* run(sql`SELECT * FROM no_such_table`))).toBe(false)
        expect(isSessionFailure(yield* run(sql`SELECT 1 / 0`))).toBe(false)
        const failure = (code: string | null, cause?: unknown) =>
          new DatabaseError({ code, retryable: false, operation: "test", detail: "x", cause })
        // By SQLSTATE class: connection exception, invalid authorization, invalid catalog name.
        for (const code of ["08006", "28P01", "3D000"]) expect(isSessionFailure(failure(code)), code).toBe(true)
        for (const code of ["57P01", "53300", "42501"]) expect(isSessionFailure(failure(code)), code).toBe(false)
        // By the socket's code, and by the driver's message for a connection the server closed.
        const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" })
        expect(isSessionFailure(classify("test")(refused))).toBe(true)
        const notFound = Object.assign(new Error("getaddrinfo ENOTFOUND db.invalid"), { code: "ENOTFOUND" })
        expect(isSessionFailure(classify("test")(notFound))).toBe(true)
        expect(isSessionFailure(classify("test")(new Error("Connection terminated unexpectedly")))).toBe(true)
        expect(isSessionFailure(classify("test")(new Error("something else")))).toBe(false)
      }))

    it.effect("permanent errors are not retryable", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        expect(yield* run(sql`SELECT 1 / 0`)).toMatchObject({ code: "22012", retryable: false, operation: "test" })
        yield* sql`INSERT INTO uniq VALUES (1)`
        expect(yield* run(sql`INSERT INTO uniq VALUES (1)`)).toMatchObject({ code: "23505", retryable: false })
        expect(yield* run(sql`SELECT * FROM no_such_table`)).toMatchObject({ code: "42P01", retryable: false })
      }))

    it.effect("lock not available and statement timeout are retryable", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO uniq VALUES (2)`
        const locked = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const holder = yield* Effect.forkChild(sql.withTransaction(
          sql`SELECT * FROM uniq WHERE id = 2 FOR UPDATE`.pipe(
            Effect.andThen(Deferred.succeed(locked, undefined)),
            Effect.andThen(Deferred.await(release))
          )
        ))
        yield* Deferred.await(locked)
        expect(yield* run(sql`SELECT * FROM uniq WHERE id = 2 FOR UPDATE NOWAIT`)).toMatchObject({
          code: "55P03",
          retryable: true
        })
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        const timedOut = yield* run(sql.withTransaction(
          Effect.andThen(sql`SET LOCAL statement_timeout = 50`, sql`SELECT pg_sleep(2)`)
        ))
        expect(timedOut).toMatchObject({ code: "57014", retryable: true })
      }))

    it.effect("a terminated backend is retryable", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const db = yield* TestDatabase.TestDatabase
        // A pool of its own, so the suite's pool never holds the killed connection.
        const victim = yield* PgClient.make({
          url: db.url,
          applicationName: "classification-victim",
          maxConnections: 1
        }).pipe(
          Effect.provide([Reactivity.layer, TestDatabase.liveClock])
        )
        const started = yield* Deferred.make<void>()
        const sleeper = yield* Effect.forkChild(run(
          Effect.andThen(Deferred.succeed(started, undefined), victim`SELECT pg_sleep(30)`)
        ))
        yield* Deferred.await(started)
        // Wait until the sleep is really running on the server, then end that backend.
        yield* Effect.repeat(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                             WHERE application_name = 'classification-victim' AND state = 'active'`,
          { until: (rows) => rows[0]!.n === 1 }
        )
        expect(yield* Faults.terminateBackends("classification-victim")).toBe(1)
        const error = yield* Fiber.join(sleeper)
        expect(error).toMatchObject({ _tag: "DatabaseError", retryable: true })
      }).pipe(Effect.scoped))

    it.effect("a refused connection is retryable", () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(
          // The pool connects on first use: the first statement meets the refusal.
          PgClient.make({ url: Redacted.make("postgres://nobody@127.0.0.1:1/none"), connectTimeout: "2 seconds" }).pipe(
            Effect.flatMap((client) => client`SELECT 1`),
            Effect.provide(Reactivity.layer),
            Effect.scoped,
            classifySqlErrors("connect")
          )
        )
        expect(error).toMatchObject({ _tag: "DatabaseError", retryable: true })
      }))

    it.effect("a failure at COMMIT is a classified error, not a defect, and nothing is kept", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        const decide = Effect.andThen(
          sql`INSERT INTO deferred_uniq VALUES (7), (7)`,
          Effect.succeed(MutationLedger.accept("ok"))
        ).pipe(Effect.orDie)
        const id = { subject: "s", operation: "deferred", key: "k" }
        const error = yield* Effect.flip(
          ledger.execute(
            id,
            { kind: "k", eligibility: new Uint8Array(), fingerprint: new Uint8Array(32) as never },
            decide
          )
        )
        expect(error).toMatchObject({
          _tag: "DatabaseError",
          code: "23505",
          retryable: false,
          operation: "MutationLedger.execute"
        })
        expect(yield* sql`SELECT * FROM durable.mutation_records WHERE operation = 'deferred'`).toEqual([])
        expect(yield* sql`SELECT * FROM deferred_uniq`).toEqual([])
      }))

    it.effect("a failing Effect rolls back every write of its transaction", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        const failed = sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO written VALUES (1)`
          yield* ledger.execute(
            { subject: "s", operation: "rollback", key: "k" },
            { kind: "k", eligibility: new Uint8Array(), fingerprint: new Uint8Array(32) as never },
            Effect.as(sql`INSERT INTO written VALUES (2)`, MutationLedger.accept(null))
          )
          yield* sql`INSERT INTO written VALUES (3)`
          return yield* Effect.fail("boom" as const)
        }))
        expect(yield* Effect.flip(failed)).toBe("boom")
        expect(yield* sql`SELECT * FROM written`).toEqual([])
        expect(yield* sql`SELECT * FROM durable.mutation_records WHERE operation = 'rollback'`).toEqual([])
      }))
  })
})
