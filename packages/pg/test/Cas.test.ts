import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as SqlClient from "effect/sql/SqlClient"
import * as Cas from "../src/Cas.js"
import { barrier, substrate } from "./support.js"

const Live = Layer.effectDiscard(
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.andThen(
      sql`CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, note text, revision bigint NOT NULL DEFAULT 1)`,
      sql`CREATE TABLE victims (id int PRIMARY KEY)`
    ))
).pipe(Layer.provideMerge(Cas.layer.pipe(Layer.provideMerge(substrate()))))

const account = (id: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<
        { balance: number; note: string | null; revision: string }
      >`SELECT balance, note, revision::text FROM accounts WHERE id = ${id}`,
      (rows) => rows[0]
    ))

let ids = 0
const newAccount = Effect.flatMap(SqlClient.SqlClient, (sql) => {
  const id = ++ids
  return Effect.as(sql`INSERT INTO accounts (id, balance) VALUES (${id}, 100)`, id)
})

describe("Cas", () => {
  it.layer(Live)((it) => {
    it.effect("updates the row at the expected revision and returns the next one", () =>
      Effect.gen(function*() {
        const cas = yield* Cas.Cas
        const id = yield* newAccount
        expect(yield* cas.update({ table: "accounts", id, expectedRevision: 1, set: { balance: 90, note: "coffee" } }))
          .toBe(2n)
        expect(yield* account(id)).toEqual({ balance: 90, note: "coffee", revision: "2" })
      }))

    it.effect("a stale revision is a CasConflict with the actual revision, and the row is unchanged", () =>
      Effect.gen(function*() {
        const cas = yield* Cas.Cas
        const id = yield* newAccount
        yield* cas.update({ table: "accounts", id, expectedRevision: 1, set: { balance: 50 } })
        const conflict = yield* Effect.flip(
          cas.update({ table: "accounts", id, expectedRevision: 1, set: { balance: 0 } })
        )
        expect(conflict).toMatchObject({
          _tag: "CasConflict",
          table: "accounts",
          id: String(id),
          expectedRevision: 1n,
          actualRevision: 2n
        })
        expect(yield* account(id)).toEqual({ balance: 50, note: null, revision: "2" })
        const missing = yield* Effect.flip(
          cas.update({ table: "accounts", id: 999_999, expectedRevision: 1, set: { balance: 0 } })
        )
        expect(missing).toMatchObject({ _tag: "CasConflict", actualRevision: null })
      }))

    it.effect("inside a caller transaction the update rolls back with it", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const cas = yield* Cas.Cas
        const id = yield* newAccount
        const failed = sql.withTransaction(
          Effect.andThen(
            cas.update({ table: "accounts", id, expectedRevision: 1, set: { balance: 1 } }),
            Effect.fail("abort" as const)
          )
        )
        expect(yield* Effect.flip(failed)).toBe("abort")
        expect(yield* account(id)).toEqual({ balance: 100, note: null, revision: "1" })
      }))

    it.effect("8 concurrent writers with the same expected revision: exactly 1 succeeds, 7 conflict", () =>
      Effect.gen(function*() {
        const cas = yield* Cas.Cas
        const id = yield* newAccount
        const gate = yield* barrier
        const fibers = yield* Effect.forEach(
          Array.from({ length: 8 }, (_, i) => i),
          (i) =>
            Effect.forkChild(
              Effect.andThen(
                gate.wait,
                Effect.result(cas.update({ table: "accounts", id, expectedRevision: 1, set: { balance: i } }))
              )
            )
        )
        yield* gate.open
        const results = yield* Fiber.joinAll(fibers)
        const winners = results.filter(Result.isSuccess)
        expect(winners.map((w) => w.success)).toEqual([2n])
        const losers = results.filter(Result.isFailure)
        expect(losers).toHaveLength(7)
        expect(losers.every((l) => l.failure._tag === "CasConflict" && l.failure.actualRevision === 2n)).toBe(true)
        expect((yield* account(id))!.revision).toBe("2")
      }))

    it.effect("hostile table and column names are typed errors and never reach SQL", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const cas = yield* Cas.Cas
        const id = yield* newAccount
        yield* sql`INSERT INTO victims VALUES (1)`
        const hostile = [
          `accounts"; DROP TABLE victims; --`,
          `acc'ounts`,
          "$$",
          "accounts;",
          "acc%nts",
          "public.accounts",
          "accounts\u0000",
          "accounts\n",
          "Accounts",
          "a".repeat(64),
          "cömptes",
          "",
          "1accounts"
        ]
        const attempts: ReadonlyArray<readonly [Cas.CasUpdate, string]> = hostile.flatMap((name) =>
          [
            [{ table: name, id, expectedRevision: 1, set: { balance: 0 } }, "table"],
            [{ table: "accounts", id, expectedRevision: 1, set: { [name]: 0 } }, `set.${name}`],
            [{ table: "accounts", idColumn: name, id, expectedRevision: 1, set: { balance: 0 } }, "idColumn"],
            [
              { table: "accounts", revisionColumn: name, id, expectedRevision: 1, set: { balance: 0 } },
              "revisionColumn"
            ],
            [{ schema: name, table: "accounts", id, expectedRevision: 1, set: { balance: 0 } }, "schema"]
          ] as const
        )
        for (const [update, field] of attempts) {
          const error = yield* Effect.flip(cas.update(update))
          expect(error).toMatchObject({ _tag: "InvalidInput", argument: field })
        }
        // 63 bytes is the longest identifier PostgreSQL keeps; it passes validation.
        const longest = "b".repeat(63)
        expect(yield* Effect.flip(cas.update({ table: longest, id, expectedRevision: 1, set: { balance: 0 } })))
          .toMatchObject({
            _tag: "DatabaseError",
            code: "42P01"
          })
        expect(yield* sql`SELECT id FROM victims`).toEqual([{ id: 1 }])
        expect(yield* account(id)).toEqual({ balance: 100, note: null, revision: "1" })
        const empty = yield* Effect.flip(cas.update({ table: "accounts", id, expectedRevision: 1, set: {} }))
        expect(empty).toMatchObject({ _tag: "InvalidInput", argument: "set" })
        const setsRevision = yield* Effect.flip(
          cas.update({ table: "accounts", id, expectedRevision: 1, set: { revision: 9 } })
        )
        expect(setsRevision).toMatchObject({ _tag: "InvalidInput", argument: "set.revision" })
      }))
  })
})
