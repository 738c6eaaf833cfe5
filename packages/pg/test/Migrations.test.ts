import * as TestRole from "@effect-durable/testing/TestRole"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import { readdirSync, readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { DurableSettings, layerSettings } from "../src/DurableConfig.js"
import * as Migrations from "../src/Migrations.js"
import { database, sqlState } from "./support.js"

const inSchema = (schema: string) => Effect.provide(layerSettings({ schema }))

// Released versions never change: their DDL, with tables in a fixed schema, hashed when each
// was released (`npm run schema:release` records them). None is released yet.
const RELEASED_DDL: Readonly<Record<number, string>> = {}

const here = dirname(fileURLToPath(import.meta.url))

describe("released migrations", () => {
  it("every released version's DDL is byte for byte what was released, and only released ones are recorded", () => {
    const released = Migrations.migrations.filter((m) => m.version <= Migrations.releasedThrough)
    expect(Object.fromEntries(released.map((m) => [m.version, Migrations.checksum(m)]))).toEqual(RELEASED_DDL)
  })

  it("a released version is frozen text: its module imports nothing but types", () => {
    const folder = join(here, "..", "src", "internal", "migrations")
    for (const file of readdirSync(folder).filter((f) => /^\d{4}_/.test(f))) {
      const version = Number(file.slice(0, 4))
      if (version > Migrations.releasedThrough) continue
      const imports = readFileSync(join(folder, file), "utf8").split("\n").filter((line) => line.startsWith("import "))
      expect(imports.filter((line) => !line.startsWith("import type ")), file).toEqual([])
    }
  })

  it("versions are numbered 1, 2, 3... with no gap, the first is the baseline, and the latest is the last", () => {
    expect(Migrations.migrations.map((m) => m.version)).toEqual(Migrations.migrations.map((_, i) => i + 1))
    expect(Migrations.migrations[0]!.name).toBe("baseline")
    expect(Migrations.latestVersion).toBe(Migrations.migrations.length)
    expect(Migrations.releasedThrough).toBeLessThanOrEqual(Migrations.latestVersion)
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

    it.effect("migrate is bounded by its lock waits, not by the operations' statement timeout (1 ms here): the whole baseline applies", () =>
      Effect.gen(function*() {
        const report = yield* Migrations.migrate()
        expect(report.version).toBe(Migrations.latestVersion)
        expect(yield* Migrations.verifySchema).toEqual([])
      }).pipe(Effect.provide(layerSettings({ schema: "m_short_timeout", statementTimeout: "1 millis" }))))

    it.effect("a schema never migrated has no versions, and a caller's transaction around the check stays usable", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const [versions, after] = yield* sql.withTransaction(
          Effect.all([Migrations.appliedVersions, sql<{ one: number }>`SELECT 1 AS one`])
        )
        expect(versions).toEqual([])
        expect(after).toEqual([{ one: 1 }])
      }).pipe(inSchema("m_never")))

    it.effect("the database holds the claim each queue's worker calls and explainClaim reads", () =>
      Effect.gen(function*() {
        yield* Migrations.migrate()
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ name: string; args: string }>`
          SELECT p.proname AS name, pg_get_function_identity_arguments(p.oid) AS args
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE n.nspname = 'm_claims' AND p.proname LIKE '%_claim' ORDER BY 1, 2`
        expect(rows).toEqual([
          { name: "inbox_claim", args: "text, integer, double precision, text, integer" },
          { name: "outbox_claim", args: "text, integer, double precision, text[], integer, integer" }
        ])
        // What explainClaim prepares: each queue's open claim, the claim's arguments first.
        const open = yield* sql<{ name: string; args: string }>`
          SELECT p.proname AS name, pg_get_function_identity_arguments(p.oid) AS args
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE n.nspname = 'm_claims' AND p.proname LIKE '%_claim_open' ORDER BY 1, 2`
        expect(open).toEqual([
          { name: "inbox_claim_open", args: "text, integer, double precision, text, integer" },
          { name: "outbox_claim_open", args: "text, integer, double precision, text[], integer, integer, boolean" }
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

    it.effect("a schema of the pre-release numbering (version 28) is adopted as the baseline in place, its rows kept; checkSchemaVersion asks for the migration first", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* prerelease("m_adopt", 28)
        yield* sql`INSERT INTO m_adopt.mutation_records (subject, operation, key, kind, eligibility, request_fingerprint, status, response)
                   VALUES ('s', 'op', 'k', 'kind', '\\x00', decode(repeat('ab', 32), 'hex'), 'accepted', '{"ok":true}')`
        yield* sql`INSERT INTO m_adopt.outbox (topic, payload) VALUES ('t', '{"n":1}')`
        // Settled messages the pre-release kept in the open table: they move out when adopted.
        yield* sql`INSERT INTO m_adopt.outbox (topic, payload, projected_at) VALUES ('t', '{"n":2}', now())`
        yield* sql`INSERT INTO m_adopt.outbox (topic, payload, dead_at, last_error) VALUES ('t', '{"n":3}', now(), 'x')`
        // A capacity the claim of before pre-release version 26 recorded, one row per message.
        yield* sql`INSERT INTO m_adopt.flow_leases (id, generation, topic, group_key) VALUES (7, 1, 'limited', '')`
        expect(yield* Migrations.appliedVersions).toEqual([])
        const refused = yield* Effect.flip(Migrations.checkSchemaVersion)
        expect(refused).toMatchObject({ _tag: "SchemaVersionMismatch", found: 28, prerelease: true })
        expect(refused.message).toMatch(/pre-release .* run the migrations once to adopt it/)
        const report = yield* Migrations.migrate()
        // Adopted as the baseline (nothing applied for it); the versions after it apply as usual.
        expect(report).toEqual({
          applied: Migrations.migrations.slice(1).map(({ name, version }) => ({ version, name })),
          version: Migrations.latestVersion
        })
        yield* Migrations.checkSchemaVersion
        expect(yield* Migrations.verifySchema).toEqual([])
        expect(yield* sql`SELECT key FROM m_adopt.mutation_records`).toEqual([{ key: "k" }])
        expect(yield* sql`SELECT payload->>'n' AS n FROM m_adopt.outbox_history`).toEqual([{ n: "2" }])
        expect(yield* sql`SELECT payload->>'n' AS n FROM m_adopt.outbox_dead`).toEqual([{ n: "3" }])
        expect(yield* sql`SELECT topic, entries::text, taken FROM m_adopt.flow_claims`).toEqual([
          { topic: "limited", entries: "{7}", taken: 1 }
        ])
        expect(yield* sql`SELECT to_regclass('m_adopt.flow_leases') IS NULL AS gone`).toEqual([{ gone: true }])
        expect(yield* sql`SELECT topic FROM m_adopt.outbox_claim('w', 10, 30, NULL, 10, 1)`).toEqual([{ topic: "t" }])
        // The previous release's five-argument claim is gone with the pre-release numbering.
        const claims = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_proc p
          JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'm_adopt' AND p.proname = 'outbox_claim'`
        expect(claims).toEqual([{ n: 1 }])
      }).pipe(inSchema("m_adopt")))

    it.effect("a pre-release schema before version 27 is refused, typed, naming what to do, and nothing changes", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* prerelease("m_old", 26)
        const refused = yield* Effect.flip(Migrations.migrate())
        expect(refused).toMatchObject({ _tag: "SchemaVersionMismatch", found: 26, prerelease: true })
        expect(refused.message).toMatch(/migrate it to pre-release version 28 with the build that made it/)
        const [{ n }] = (yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM m_old.schema_migrations`) as [
          { n: number }
        ]
        expect(n).toBe(26)
      }).pipe(inSchema("m_old")))

    it.effect("a version applied from other DDL than this code's is refused at start, naming it; verify names the changed body", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* Migrations.migrate()
        // What a development database migrated by an earlier text of an unreleased version holds.
        yield* sql`UPDATE m_changed.schema_migrations SET checksum = repeat('0', 64) WHERE version = 1`
        yield* sql.unsafe(`CREATE OR REPLACE FUNCTION m_changed.flow_tokens(tokens double precision,
          tokens_at timestamptz, rate_limit integer, rate_period double precision, rate_burst integer, at timestamptz)
          RETURNS double precision LANGUAGE sql IMMUTABLE AS 'SELECT 1::double precision'`)
        const refused = yield* Effect.flip(Migrations.checkSchemaVersion)
        expect(refused).toMatchObject({ _tag: "SchemaVersionMismatch", changed: [{ version: 1, name: "baseline" }] })
        expect(refused.message).toMatch(/applied version 1 \(baseline\) from other DDL than this code's/)
        expect(yield* Migrations.verifySchema).toEqual([
          expect.objectContaining({ kind: "function-definition", object: expect.stringMatching(/^flow_tokens\(/) })
        ])
      }).pipe(inSchema("m_changed")))

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
        yield* sql`DROP FUNCTION m_drift.outbox_claim(text, integer, double precision, text[], integer, integer)`
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
            object: "outbox_claim(text, integer, double precision, text[], integer, integer)"
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
        >`SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'Durable_Mixed' AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1`
        expect(tables.map((t) => t.name)).toEqual([
          "feed_consumers",
          "feed_lineage",
          "flow_claims",
          "flow_group_buckets",
          "flow_group_limits",
          "flow_group_state",
          "flow_limits",
          "inbox",
          "inbox_flow_claims",
          "inbox_limits",
          "mutation_records",
          "outbox",
          "outbox_dead",
          "outbox_history",
          "paused_topics",
          "rate_adaptive",
          "rate_buckets",
          "rate_windows",
          "relay_slots",
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
        const claimed = yield* runtime.sql`SELECT * FROM m_grants.outbox_claim('w', 10, 30, NULL, 10, 1)`
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

/** Builds schema `schema` as the pre-release numbering did, up to `version` (its recorded DDL). */
const prerelease = (schema: string, version: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const history = JSON.parse(readFileSync(join(here, "fixtures", "prerelease-migrations.json"), "utf8")) as Array<
      { version: number; name: string; statements: Array<string> }
    >
    yield* sql.unsafe(`CREATE SCHEMA "${schema}"`)
    yield* sql.unsafe(`CREATE TABLE "${schema}".schema_migrations (version integer NOT NULL, name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now(), CONSTRAINT schema_migrations_pkey PRIMARY KEY (version))`)
    for (const step of history.filter((m) => m.version <= version)) {
      for (const statement of step.statements) yield* sql.unsafe(statement.replaceAll("\"__schema__\"", `"${schema}"`))
      yield* sql`INSERT INTO ${sql(schema)}.schema_migrations (version, name) VALUES (${step.version}, ${step.name})`
    }
  })
