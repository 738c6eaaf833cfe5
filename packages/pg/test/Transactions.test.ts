import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as SqlClient from "effect/sql/SqlClient"
import * as Transactions from "../src/Transactions.js"

describe("Transactions (the substrate's primitives, for applications)", () => {
  it.layer(TestSubstrate.layer())((it) => {
    it.effect("withTimeouts bounds a lock wait: a held row fails retryable with 55P03, and the caller's settings come back", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE tx_rows (id int PRIMARY KEY, n int)`
        yield* sql`INSERT INTO tx_rows VALUES (1, 0)`
        const error = yield* Effect.flip(Effect.scoped(Effect.gen(function*() {
          const holder = yield* sql.reserve
          yield* holder.executeUnprepared("BEGIN", [], undefined)
          yield* holder.executeUnprepared("SELECT * FROM tx_rows FOR UPDATE", [], undefined)
          yield* Effect.addFinalizer(() => Effect.ignore(holder.executeUnprepared("ROLLBACK", [], undefined)))
          return yield* sql`UPDATE tx_rows SET n = n + 1`.pipe(Transactions.withTimeouts({ lockTimeout: "100 millis" }))
        })))
        expect(error).toMatchObject({ _tag: "DatabaseError", code: "55P03", retryable: true })
        const settings = yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`SET LOCAL lock_timeout = '9s'`
          yield* sql`SELECT 1`.pipe(
            Transactions.withTimeouts({ lockTimeout: "100 millis", statementTimeout: "1 second" })
          )
          return yield* sql<{ lock: string; statement: string }>`
            SELECT current_setting('lock_timeout') AS lock, current_setting('statement_timeout') AS statement`
        }))
        expect(settings).toEqual([{ lock: "9s", statement: "0" }])
        expect(yield* Effect.flip(Effect.void.pipe(Transactions.withTimeouts({ lockTimeout: -1 })))).toMatchObject({
          _tag: "InvalidInput",
          argument: "lockTimeout"
        })
      }))

    it.effect("transaction: a connection cut inside it is a retryable DatabaseError (sql.withTransaction alone gives an unclassified SqlError); its own failures stay its own", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const cut = sql`SELECT pg_terminate_backend(pg_backend_pid())`
        const bare = yield* Effect.exit(sql.withTransaction(cut))
        // Since effect 4.1.5 no longer a defect (its failed ROLLBACK was one), but an SqlError
        // whose reason is "unknown": nothing says a retry may succeed.
        expect(bare._tag === "Failure" && bare.cause.reasons.map((reason) => reason._tag)).toEqual(["Fail"])
        const error = yield* Effect.flip(cut.pipe(Transactions.transaction("test.cut")))
        expect(error).toMatchObject({ _tag: "DatabaseError", operation: "test.cut", retryable: true })
        // The pool has a good connection again; a failure of the body is the body's.
        expect(yield* Effect.flip(Effect.fail("refused").pipe(Transactions.transaction("test.own")))).toBe("refused")
        expect(yield* sql<{ n: number }>`SELECT 1 AS n`.pipe(Transactions.transaction("test.ok"))).toEqual([{ n: 1 }])
      }))

    it.effect("advisoryLock holds a key until the transaction ends; a second holder waits or is told no", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const held = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const first = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
          expect(yield* Transactions.advisoryLock("billing", "invoice-7")).toBe(true)
          yield* Deferred.succeed(held, undefined)
          yield* Deferred.await(release)
        })))
        yield* Deferred.await(held)
        expect(yield* sql.withTransaction(Transactions.advisoryLock("billing", "invoice-7", { wait: false }))).toBe(
          false
        )
        // Another key, or another namespace, is another lock.
        expect(yield* sql.withTransaction(Transactions.advisoryLock("billing", "invoice-8", { wait: false }))).toBe(
          true
        )
        expect(yield* sql.withTransaction(Transactions.advisoryLock("shipping", "invoice-7", { wait: false }))).toBe(
          true
        )
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(first)
        expect(yield* sql.withTransaction(Transactions.advisoryLock("billing", "invoice-7", { wait: false }))).toBe(
          true
        )
        expect(yield* Effect.flip(Transactions.advisoryLock("billing", "invoice-7"))).toMatchObject({
          _tag: "InvalidInput",
          argument: "transaction"
        })
      }))
  })
})
