/**
 * The schema's record of its versions (`schema_migrations`): which versions were applied, under
 * what name and with what checksum (SHA-256 of the version's DDL, written for a fixed schema).
 * A record whose version 1 is not the baseline was written by the pre-release numbering (28
 * steps before the first release); its versions are not this code's.
 */
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import { createHash } from "node:crypto"
import type { Migration } from "../Migrations.js"

/** The table, created by the runner (it records the migrations, it is not one of them). */
export const historyTable = (table: string) =>
  `CREATE TABLE IF NOT EXISTS ${table} (
      version integer NOT NULL,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now(),
      checksum text,
      CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
    )`

/** How every checksum writes the tables: a fixed schema, so one version has one checksum. */
const CHECKSUM_TABLES = (table: string) => `"s"."${table}"`

/** A version's checksum: SHA-256 (hex) of its statements, written for schema `s`. */
export const checksumOf = (migration: Migration): string =>
  createHash("sha256").update(migration.statements(CHECKSUM_TABLES).join("\n;\n")).digest("hex")

export interface Applied {
  readonly version: number
  readonly name: string
  /** NULL in a record the pre-release numbering wrote. */
  readonly checksum: string | null
}

/** The name version 1 had in the pre-release numbering (its first step, the mutation ledger). */
const PRERELEASE_FIRST = "mutation ledger"

/** Whether `applied` was written by the pre-release numbering. */
export const isPrerelease = (applied: ReadonlyArray<Applied>): boolean =>
  applied.some((row) => row.version === 1 && row.name === PRERELEASE_FIRST)

/**
 * The record (empty when the schema was never migrated). The table is looked up first rather
 * than its absence caught: a failed statement would leave a caller's transaction aborted; and
 * a record of the pre-release numbering has no checksum column.
 */
export const readApplied = (sql: SqlClient.SqlClient, schema: string, table: string) =>
  Effect.gen(function*() {
    const [found] = yield* sql<{ present: boolean; checksums: boolean }>`
      SELECT to_regclass(${table}) IS NOT NULL AS present,
             EXISTS (SELECT 1 FROM information_schema.columns
                      WHERE table_schema = ${schema} AND table_name = 'schema_migrations' AND column_name = 'checksum')
               AS checksums`
    if (found?.present !== true) return [] as ReadonlyArray<Applied>
    return yield* sql<Applied>`
      SELECT version, name, ${sql.literal(found.checksums ? "checksum" : "NULL::text")} AS checksum
        FROM ${sql.literal(table)} ORDER BY version`
  })
