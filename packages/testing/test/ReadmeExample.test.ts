import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

it.layer(TestDatabase.layerFresh())((it) => {
  it.effect("sees its own rows", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE notes (id int)`
      expect(yield* sql`SELECT * FROM notes`).toEqual([])
    }))
})
