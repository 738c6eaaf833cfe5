// README "Migrations": migrate (idempotent, safe with several runners), check for drift, and
// give the application's runtime role exactly what it uses. Run as the owner role.
import * as Migrations from "@effect-durable/pg/Migrations"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const report = yield* Migrations.migrate() // { applied: [{ version: 1, name: "baseline" }], version: 1 }
  const drift = yield* Migrations.verifySchema // [] on a clean database; drift as data otherwise
  // The role must exist: the substrate grants, it does not create roles.
  yield* sql`DO $$ BEGIN CREATE ROLE app_runtime LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`
  yield* Migrations.grantRuntimeAccess("app_runtime")
  return { report, drift }
})
