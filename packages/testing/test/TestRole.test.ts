import { sqlStateOf } from "@effect-durable/pg/ErrorClassification"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestDatabase from "../src/TestDatabase.js"
import * as TestRole from "../src/TestRole.js"

const sqlState = (error: unknown) => sqlStateOf(error)

describe("TestRole", () => {
  it.layer(TestDatabase.layerFresh())((it) => {
    it.effect("a separate role has only the rights the suite grants it", () =>
      Effect.gen(function*() {
        const owner = yield* SqlClient.SqlClient
        yield* owner`CREATE SCHEMA app`
        yield* owner`CREATE TABLE app.notes (id int PRIMARY KEY, body text)`
        yield* owner`INSERT INTO app.notes VALUES (1, 'hello')`
        const roleName = yield* Effect.scoped(
          Effect.gen(function*() {
            const reader = yield* TestRole.make("reader")
            const [whoami] = yield* reader.sql<{ who: string }>`SELECT current_user AS who`
            expect(whoami!.who).toBe(reader.name)
            const denied = yield* Effect.flip(reader.sql`SELECT body FROM app.notes`)
            expect(sqlState(denied)).toBe("42501")
            yield* owner`GRANT USAGE ON SCHEMA app TO ${owner(reader.name)}`
            yield* owner`GRANT SELECT ON app.notes TO ${owner(reader.name)}`
            const rows = yield* reader.sql<{ body: string }>`SELECT body FROM app.notes`
            expect(rows.map((row) => row.body)).toEqual(["hello"])
            const write = yield* Effect.flip(reader.sql`INSERT INTO app.notes VALUES (2, 'no')`)
            expect(sqlState(write)).toBe("42501")
            const ddl = yield* Effect.flip(reader.sql`CREATE TABLE app.mine (id int)`)
            expect(sqlState(ddl)).toBe("42501")
            return reader.name
          })
        )
        const left = yield* owner<{ n: number }>`SELECT count(*)::int AS n FROM pg_roles WHERE rolname = ${roleName}`
        expect(left[0]!.n).toBe(0)
      }))
  })
})
