import * as TestRole from "@effect-durable/testing/TestRole"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import { createHash } from "node:crypto"
import { DurableSettings, layerSettings } from "../src/DurableConfig.js"
import * as Migrations from "../src/Migrations.js"
import { database, sqlState } from "./support.js"

const inSchema = (schema: string) => Effect.provide(layerSettings({ schema }))

// Released versions never change: their DDL, with tables in a fixed schema, hashed when each was released.
const RELEASED_DDL: Readonly<Record<number, string>> = {
  1: "cf4142e83d04671383951900addf6a183996c86be6536d78f2ef67617baa0100",
  2: "6067369652ea5fcba17560ddc6c42b4b3c088a9de7681ab7699e4b23529cace9",
  3: "6307ad44645f60df97a2dd0bb0e01e58dbaa13aa4fdfb74ab696a77f33f49b67",
  4: "904373fa3b991dd74d305b80533ce27fd56eb14efabbfd89a4fff90d059b8c1a",
  5: "8e1618273a9e637394a8b108506341ccccc3fdaa5f5261a79f843febac14bd22",
  6: "179c8b0332018e5e022682599f9728279319d4cf76d39a31d231d2b2896a1ca6",
  7: "1454302a9aab37aee515961c371e6fec25372651ea525355a702851276ac1508",
  8: "8b096428db9c013b2b625151451557000a3760b76f5e9f43faeeabfffc43c448",
  9: "447ad7e943eaa403a117ba883494ffa80ef8f6e062779cc9b3ba26cee24b3011",
  10: "cbb9648342ea566e66fcf7bf640acc857af6a132c51bcedc79344003dbc5397f",
  11: "9b3d0fec0093188d47b5df9efada6d8effdc31a26f7ca1da21017e378aa6e5bc",
  12: "64656c454de753da86639b1ae617e7d3d38a5d8b7b38cdd03e958f7674adfe1e",
  13: "d89f6f5104c13863cf8af9a6031a8bc6911b377139d29ec05ac853e990483d32",
  14: "42e491f5912e4debced1b96c26cfe921aaac56ee59d31a74848a3fcbd1d9067d",
  15: "515dc3171dbc55d3262f792f69255fb477aa566278d749855601db5a056b70a0",
  16: "29e06729b4602e7b439b6e2a2fbe9380e62ebc8f2a3571b50d8b93fdf2ee666b",
  17: "5b57e32c9c322ad3cf5700ed6dcb4e90fddb214d9ea2ad718a615e641b4ef5d1",
  18: "395d02bc5172ade54eb29ac9b92425775b932b9573e3bd607cc595869df3c580",
  19: "0c4c50d4a2fbc0be1266706c6a6c90b5c23f42b6ac9e8d7db4575ff5cef9a1f2",
  20: "ca97aafac8a027caa1c45fccdc0e98f75567d1ae484a7e6dac97d18b8bf1f3fa",
  21: "9e89144cc0e6a2178c8c26fcf2ea48285a86d0fb448f18a631d852e4aa8e04ed",
  22: "2076971ed28ca668fe196bba99318c061ec2ba491d7803658a2d120dfcd85c92",
  23: "5ff8640cc0089fe4aee86abbd535cb6492706ef136ce2e3236d6a55b02190973",
  24: "78fad518769059dda1e682ea3ef56c8557ba1a98833f58f426429814d71f6ecb",
  25: "d916b13cc14bceb4a670e670c03760b6b284c4884ae4ec31dd7cf0f41b9da11a",
  26: "e777aba0649c569670c2471078a4f2615fcded36f6f50631b10ecab82876037a",
  27: "b71be4ace622736b79091814b5a4934cfe8ab29b86e6d3a87eee24ca7821d10e",
  28: "ea6a222de3ad57db84db6820f5a1ac357592ea6031c71b09fb3b6441326a2da3"
}

describe("released migrations", () => {
  it("every released version's DDL is byte for byte what was released", () => {
    const t = (table: string) => `"s"."${table}"`
    const hashes = Object.fromEntries(Migrations.migrations.map((m) => [
      m.version,
      createHash("sha256").update(m.statements(t).join("\n;\n")).digest("hex")
    ]))
    expect(hashes).toEqual(RELEASED_DDL)
  })

  it("versions are numbered 1, 2, 3... with no gap, and the latest is the last", () => {
    expect(Migrations.migrations.map((m) => m.version)).toEqual(Migrations.migrations.map((_, i) => i + 1))
    expect(Migrations.latestVersion).toBe(Migrations.migrations.length)
  })
})

describe("Migrations", () => {
  it.layer(database())((it) => {
    it.effect("migrate builds every version once; a second run applies nothing; the schema verifies clean", () =>
      Effect.gen(function*() {
        const first = yield* Migrations.migrate()
        expect(first.applied.map((m) => m.version)).toEqual(Migrations.migrations.map((m) => m.version))
        expect(first.version).toBe(Migrations.latestVersion)
        const again = yield* Migrations.migrate()
        expect(again).toEqual({ applied: [], version: Migrations.latestVersion })
        expect(yield* Migrations.appliedVersions).toEqual(Migrations.migrations.map((m) => m.version))
        expect(yield* Migrations.verifySchema).toEqual([])
      }).pipe(inSchema("m_clean")))

    it.effect("a schema never migrated has no versions, and a caller's transaction around the check stays usable", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const [versions, after] = yield* sql.withTransaction(
          Effect.all([Migrations.appliedVersions, sql<{ one: number }>`SELECT 1 AS one`])
        )
        expect(versions).toEqual([])
        expect(after).toEqual([{ one: 1 }])
      }).pipe(inSchema("m_never")))

    it.effect("the database holds the claim each queue's worker calls and explainClaim reads, and the previous release's outbox claim for a rolling deploy", () =>
      Effect.gen(function*() {
        yield* Migrations.migrate()
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ name: string; args: string }>`
          SELECT p.proname AS name, pg_get_function_identity_arguments(p.oid) AS args
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE n.nspname = 'm_claims' AND p.proname LIKE '%_claim' ORDER BY 1, 2`
        expect(rows).toEqual([
          { name: "inbox_claim", args: "text, integer, double precision, text, integer" },
          { name: "outbox_claim", args: "text, integer, double precision, text[], integer" },
          { name: "outbox_claim", args: "text, integer, double precision, text[], integer, integer" }
        ])
      }).pipe(inSchema("m_claims")))

    it.effect("four concurrent runners: exactly one applies each version", () =>
      Effect.gen(function*() {
        const reports = yield* Effect.all(Array.from({ length: 4 }, () => Migrations.migrate()), {
          concurrency: "unbounded"
        })
        const applied = reports.flatMap((report) => report.applied.map((m) => m.version)).sort((a, b) => a - b)
        expect(applied).toEqual(Migrations.migrations.map((m) => m.version))
        expect(reports.every((report) => report.version === Migrations.latestVersion)).toBe(true)
        expect(yield* Migrations.verifySchema).toEqual([])
      }).pipe(inSchema("m_concurrent")))

    it.effect("upgrades a database built by version 1, keeping its rows", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const v1 = yield* Migrations.migrate({ upTo: 1 })
        expect(v1.applied.map((m) => m.version)).toEqual([1])
        const drift = yield* Migrations.verifySchema
        expect(drift).toContainEqual(expect.objectContaining({ kind: "version-behind", actual: "1" }))
        expect(drift).toContainEqual(
          expect.objectContaining({ kind: "missing-index", object: "mutation_records_created_at_idx" })
        )
        yield* sql`INSERT INTO m_upgrade.mutation_records (subject, operation, key, kind, eligibility, request_fingerprint, status, response)
                   VALUES ('s', 'op', 'k', 'kind', '\\x00', decode(repeat('ab', 32), 'hex'), 'accepted', '{"ok":true}')`
        const forward = yield* Migrations.migrate()
        expect(forward.applied.map((m) => m.version)).toEqual(Migrations.migrations.slice(1).map((m) => m.version))
        const rows = yield* sql<
          { key: string; effect_applied: boolean }
        >`SELECT key, effect_applied FROM m_upgrade.mutation_records`
        expect(rows).toEqual([{ key: "k", effect_applied: true }])
        expect(yield* Migrations.verifySchema).toEqual([])
      }).pipe(inSchema("m_upgrade")))

    it.effect("verifySchema reports a missing schema, and missing or changed tables, columns, indexes, constraints", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        expect(yield* Migrations.verifySchema).toEqual([
          { kind: "missing-schema", object: "m_drift", expected: "m_drift", actual: null }
        ])
        yield* Migrations.migrate()
        yield* sql`DROP INDEX m_drift.mutation_records_created_at_idx`
        yield* sql`ALTER TABLE m_drift.mutation_records DROP CONSTRAINT mutation_records_fingerprint_length`
        yield* sql`ALTER TABLE m_drift.mutation_records ALTER COLUMN kind TYPE varchar(10)`
        yield* sql`ALTER TABLE m_drift.mutation_records ADD COLUMN note text`
        // A claim function replaced by a hand-edited one, another dropped.
        yield* sql.unsafe(
          `CREATE OR REPLACE FUNCTION m_drift.inbox_claim(text, integer, double precision, text, integer)
          RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean, consumer text, message_id text,
                         payload jsonb, headers jsonb, received_at text)
          LANGUAGE sql AS 'SELECT NULL::text, NULL::text, 0, false, NULL::text, NULL::text, NULL::jsonb, NULL::jsonb, NULL::text WHERE false'`
        )
        yield* sql`DROP FUNCTION m_drift.outbox_claim(text, integer, double precision, text[], integer)`
        const drift = yield* Migrations.verifySchema
        expect(drift).toEqual(expect.arrayContaining([
          expect.objectContaining({ kind: "missing-index", object: "mutation_records_created_at_idx" }),
          expect.objectContaining({
            kind: "missing-constraint",
            object: "mutation_records.mutation_records_fingerprint_length"
          }),
          {
            kind: "column-type",
            object: "mutation_records.kind",
            expected: "text NOT NULL",
            actual: "character varying(10) NOT NULL"
          },
          expect.objectContaining({ kind: "unexpected-column", object: "mutation_records.note" }),
          expect.objectContaining({
            kind: "function-definition",
            object: "inbox_claim(text, integer, double precision, text, integer)"
          }),
          expect.objectContaining({
            kind: "missing-function",
            object: "outbox_claim(text, integer, double precision, text[], integer)"
          })
        ]))
        expect(drift).toHaveLength(6)
        yield* sql`DROP TABLE m_drift.mutation_records`
        const gone = yield* Migrations.verifySchema
        expect(gone).toContainEqual(expect.objectContaining({ kind: "missing-table", object: "mutation_records" }))
      }).pipe(inSchema("m_drift")))

    it.effect("works in a quoted, mixed-case schema", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* Migrations.migrate()
        const tables = yield* sql<
          { name: string }
        >`SELECT tablename AS name FROM pg_tables WHERE schemaname = 'Durable_Mixed' ORDER BY 1`
        expect(tables.map((t) => t.name)).toEqual([
          "flow_claims",
          "flow_group_buckets",
          "flow_group_limits",
          "flow_group_state",
          "flow_leases",
          "flow_limits",
          "inbox",
          "inbox_flow_claims",
          "inbox_limits",
          "mutation_records",
          "outbox",
          "paused_topics",
          "rate_adaptive",
          "rate_buckets",
          "rate_windows",
          "runtime_roles",
          "schedule_slots",
          "schedules",
          "schema_migrations",
          "workflow_executions",
          "workflow_steps"
        ])
        expect(yield* Migrations.verifySchema).toEqual([])
        const settings = yield* DurableSettings
        expect(settings.table("mutation_records")).toBe(`"Durable_Mixed"."mutation_records"`)
      }).pipe(inSchema("Durable_Mixed")))

    it.effect("an owner role migrates; a runtime role with USAGE and DML rights cannot run DDL", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const owner = yield* TestRole.make("owner")
        const [{ db }] = (yield* sql<{ db: string }>`SELECT current_database() AS db`) as [{ db: string }]
        yield* sql.unsafe(`GRANT CREATE ON DATABASE "${db}" TO "${owner.name}"`)
        const asOwner = Layer.succeed(SqlClient.SqlClient, owner.sql)
        const report = yield* Migrations.migrate().pipe(Effect.provide(asOwner))
        expect(report.version).toBe(Migrations.latestVersion)
        // Re-running as the owner after the database-level right is gone still works.
        yield* sql.unsafe(`REVOKE CREATE ON DATABASE "${db}" FROM "${owner.name}"`)
        expect((yield* Migrations.migrate().pipe(Effect.provide(asOwner))).applied).toEqual([])
        const runtime = yield* TestRole.make("runtime")
        yield* Migrations.grantRuntimeAccess(runtime.name).pipe(Effect.provide(asOwner))
        const rows = yield* runtime.sql`SELECT count(*) FROM m_roles.mutation_records`
        expect(rows).toHaveLength(1)
        const ddl = yield* Effect.flip(runtime.sql`CREATE TABLE m_roles.intruder (id int)`)
        expect(sqlState(ddl)).toBe("42501")
        const alter = yield* Effect.flip(runtime.sql`ALTER TABLE m_roles.mutation_records ADD COLUMN x int`)
        expect(sqlState(alter)).toBe("42501")
        const migrateAsRuntime = yield* Effect.flip(
          Migrations.migrate().pipe(Effect.provide(Layer.succeed(SqlClient.SqlClient, runtime.sql)))
        )
        expect(migrateAsRuntime._tag).toBe("DatabaseError")
      }).pipe(Effect.scoped, inSchema("m_roles")))

    it.effect("the runtime role gets exactly what it uses: it cannot rewrite the migration history, and later migrations grant it their tables", () =>
      Effect.gen(function*() {
        const runtime = yield* TestRole.make("runtime_grants")
        yield* Migrations.migrate()
        yield* Migrations.grantRuntimeAccess(runtime.name)
        const denied = yield* Effect.flip(
          runtime.sql`INSERT INTO m_grants.schema_migrations (version, name) VALUES (999, 'forged')`
        )
        expect(sqlState(denied)).toBe("42501")
        const deleteDenied = yield* Effect.flip(runtime.sql`DELETE FROM m_grants.schema_migrations`)
        expect(sqlState(deleteDenied)).toBe("42501")
        expect(yield* runtime.sql`SELECT version FROM m_grants.schema_migrations WHERE version = 1`).toEqual([{
          version: 1
        }])
        // The runtime works: an outbox message written and claimed as that role.
        yield* runtime.sql`INSERT INTO m_grants.outbox (topic, payload) VALUES ('t', '{}')`
        const claimed = yield* runtime.sql`SELECT * FROM m_grants.outbox_claim('w', 10, 30, NULL, 10)`
        expect(claimed).toHaveLength(1)
        // And with a flow limit on its topic, through the current claim (its own tables granted).
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO m_grants.flow_limits (topic, max_in_flight, updated_by) VALUES ('t', 1, 'test')`
        yield* runtime.sql`INSERT INTO m_grants.outbox (topic, payload) VALUES ('t', '{}'), ('t', '{}')`
        expect(yield* runtime.sql`SELECT * FROM m_grants.outbox_claim('w', 10, 30, NULL, 10, 1)`).toHaveLength(1)
        expect(yield* runtime.sql`SELECT * FROM m_grants.outbox_claim('w', 10, 30, NULL, 10, 1)`).toHaveLength(0)
        // Every migration run grants the remembered roles what the versions made: a table a
        // later version adds, or a grant lost by hand.
        yield* sql`REVOKE ALL ON m_grants.paused_topics FROM ${sql(runtime.name)}`
        expect(sqlState(yield* Effect.flip(runtime.sql`SELECT * FROM m_grants.paused_topics`))).toBe("42501")
        expect((yield* Migrations.migrate()).applied).toEqual([])
        expect(yield* runtime.sql`SELECT topic FROM m_grants.paused_topics`).toEqual([])
        // An unknown role is a typed failure, not a half-applied grant.
        const unknown = yield* Effect.flip(Migrations.grantRuntimeAccess("no_such_role"))
        expect(unknown).toMatchObject({ _tag: "DatabaseError", code: "42704" })
      }).pipe(Effect.scoped, inSchema("m_grants")))
  })
})
