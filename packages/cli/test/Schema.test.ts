// migrate, verify, grant and doctor, run as the built binary against the suite's database;
// each test works in a schema of its own (`--schema`), so it starts from nothing.
import * as Migrations from "@effect-durable/pg/Migrations"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { cliOn, exec, json, Substrate } from "./support.js"

let schemas = 0
const freshSchema = () => `cli_schema_${process.pid}_${++schemas}`

describe("effect-durable migrate, verify, grant, doctor", () => {
  it.layer(Substrate, { timeout: "120 seconds" })((it) => {
    it.effect("migrate --dry-run lists the pending versions, migrate applies them, a second has nothing to do", () =>
      Effect.gen(function*() {
        const schema = freshSchema()
        const dry = yield* cliOn(["--schema", schema, "migrate", "--dry-run", "--json"])
        expect(dry.code).toBe(0)
        expect(json(dry)).toEqual({
          schema,
          version: 0,
          latest: Migrations.latestVersion,
          pending: Migrations.migrations.map(({ name, version }) => ({ version, name }))
        })
        const text = yield* cliOn(["--schema", schema, "migrate", "--dry-run"])
        expect(text.stdout).toContain(`schema ${schema} is at version 0; migrate would apply:`)
        const applied = yield* cliOn(["--schema", schema, "migrate"])
        expect(applied.code).toBe(0)
        expect(applied.stdout).toContain(`applied 1  baseline`)
        expect(applied.stdout).toContain(`schema ${schema} is at version ${Migrations.latestVersion}`)
        expect(applied.stderr).toContain("migrating schema") // progress and logs on stderr
        const again = yield* cliOn(["migrate", "--json", "--schema", schema])
        expect(json(again)).toEqual({ schema, applied: [], version: Migrations.latestVersion })
        const nothing = yield* cliOn(["--schema", schema, "migrate", "--dry-run"])
        expect(nothing.stdout.trim()).toBe(
          `schema ${schema} is at version ${Migrations.latestVersion}: nothing to apply`
        )
      }))

    it.effect("a command on a schema behind this release exits 4 and names migrate", () =>
      Effect.gen(function*() {
        const result = yield* cliOn(["--schema", freshSchema(), "status"])
        expect(result).toMatchObject({ code: 4, stdout: "" })
        expect(result.stderr.trim()).toMatch(
          /^effect-durable: schema cli_schema_\d+_\d+ is at version 0; this release needs \d+: run effect-durable migrate$/
        )
      }))

    it.effect("verify exits 0 on a clean schema and 1 on drift, listing it", () =>
      Effect.gen(function*() {
        const schema = freshSchema()
        yield* cliOn(["--schema", schema, "migrate"])
        const clean = yield* cliOn(["--schema", schema, "verify"])
        expect(clean.code).toBe(0)
        expect(clean.stdout).toContain("no drift")
        yield* exec(`DROP INDEX "${schema}".outbox_open_key_idx`)
        const drifted = yield* cliOn(["--schema", schema, "verify", "--json"])
        expect(drifted.code).toBe(1)
        expect(json(drifted).drift).toEqual([
          expect.objectContaining({ kind: "missing-index", object: "outbox_open_key_idx" })
        ])
        expect(drifted.stderr.trim()).toBe(`effect-durable: schema ${schema}: 1 difference from the migrations`)
        const table = yield* cliOn(["--schema", schema, "verify"])
        expect(table.stdout).toMatch(/KIND\s+OBJECT\s+EXPECTED\s+ACTUAL\nmissing-index\s+outbox_open_key_idx/)
      }))

    it.effect("grant gives a role exactly the runtime access; a role that does not exist exits 5", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const role = `cli_runtime_${process.pid}`
        yield* exec(`DROP ROLE IF EXISTS ${role}`)
        yield* exec(`CREATE ROLE ${role}`)
        const granted = yield* cliOn(["grant", role, "--json"])
        expect(granted.code).toBe(0)
        expect(json(granted)).toEqual({ schema: "durable", role, granted: true })
        const [rights] = yield* sql<{ write: boolean; ddl: boolean }>`
          SELECT has_table_privilege(${role}, 'durable.outbox', 'INSERT') AS write,
                 has_schema_privilege(${role}, 'durable', 'CREATE') AS ddl`
        expect(rights).toEqual({ write: true, ddl: false })
        const missing = yield* cliOn(["grant", "no_such_role_here"])
        expect(missing.code).toBe(5)
        expect(missing.stderr).toContain(`role "no_such_role_here" does not exist`)
        const bad = yield* cliOn(["grant", "Robert'); DROP TABLE x;--"])
        expect(bad.code).toBe(2)
        expect(bad.stderr).toContain("invalid <role>")
        yield* exec(`DROP OWNED BY ${role}`)
        yield* exec(`DROP ROLE ${role}`)
      }))

    it.effect("doctor runs every check and exits 0 on a healthy database, 1 when the schema is behind", () =>
      Effect.gen(function*() {
        const healthy = yield* cliOn(["doctor", "--json"])
        expect(healthy.code).toBe(0)
        const checks = json<{ checks: ReadonlyArray<{ name: string; status: string; detail: string }> }>(healthy).checks
        expect(checks.map((c) => c.name)).toEqual([
          "schema version",
          "schema drift",
          "LISTEN/NOTIFY",
          "pooler",
          "table bloat",
          "oldest transaction",
          "feed horizon",
          "replication slots"
        ])
        expect(checks.filter((c) => c.name !== "oldest transaction").every((c) => c.status === "ok")).toBe(true)
        const text = yield* cliOn(["doctor"])
        expect(text.stdout).toMatch(/^ok {4}schema version: durable is at version \d+/m)
        const behind = yield* cliOn(["--schema", freshSchema(), "doctor"])
        expect(behind.code).toBe(1)
        expect(behind.stdout).toMatch(/^FAIL {2}schema version: .* run effect-durable migrate$/m)
        expect(behind.stderr.trim()).toBe("effect-durable: doctor: schema version")
      }))
  })
})
