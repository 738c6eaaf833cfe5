// README "CAS": two editors load revision 1 of a document; only the first save wins.
import * as Cas from "@effect-durable/pg/Cas"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const cas = yield* Cas.Cas
  yield* sql`CREATE TABLE IF NOT EXISTS documents (id bigint PRIMARY KEY, body text, revision bigint NOT NULL DEFAULT 1)`
  yield* sql`INSERT INTO documents (id, body) VALUES (1, 'draft') ON CONFLICT DO NOTHING`

  const saved = yield* cas.update({ table: "documents", id: 1, expectedRevision: 1, set: { body: "alice's edit" } })
  const lost = yield* Effect.flip(
    cas.update({ table: "documents", id: 1, expectedRevision: 1, set: { body: "bob's edit" } })
  )
  yield* Console.log(saved) // 2n
  yield* Console.log(lost.message) // CasConflict: documents 1: expected revision 1, found 2 -> reload and retry
  return { saved, lost }
})
