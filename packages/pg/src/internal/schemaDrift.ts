/**
 * The drift checker behind `Migrations.verifySchema`: the migrations are applied to a scratch
 * schema inside a transaction that is always rolled back, and the two catalogs (tables,
 * columns, indexes, constraints, functions) are compared object by object.
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { randomBytes } from "node:crypto"
import { DurableSettings } from "../DurableConfig.js"
import { classifySqlErrors } from "../ErrorClassification.js"
import type { Migration, SchemaDrift } from "../Migrations.js"
import { historyTable } from "./migrationHistory.js"
import { quote } from "./sqlText.js"

interface CatalogObject {
  readonly kind: "table" | "column" | "index" | "constraint" | "function"
  readonly object: string
  readonly definition: string
}

// Schema names are replaced by a placeholder so definitions compare across schemas. The
// partitions of a partitioned table (the outbox history's days) come and go with retention:
// what the migrations make is the partitioned table, its default partition and their indexes.
const readCatalog = (sql: SqlClient.SqlClient, schema: string) =>
  sql<CatalogObject>`
    -- Text, not name: the union takes the first branch's types, and a name is cut at 63 bytes
    -- (a function's signature is longer).
    SELECT 'table' AS kind, c.relname::text AS object, '' AS definition
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = ${schema} AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    UNION ALL
    SELECT 'column', c.relname || '.' || a.attname,
           format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
             || CASE WHEN a.attgenerated = 's' THEN ' GENERATED ' || pg_get_expr(d.adbin, d.adrelid) ELSE '' END
      FROM pg_attribute a
      JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE n.nspname = ${schema} AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND a.attnum > 0
       AND NOT a.attisdropped
    UNION ALL
    SELECT 'index', i.relname, replace(pg_get_indexdef(i.oid), quote_ident(n.nspname) || '.', '<schema>.')
      FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_namespace n ON n.oid = i.relnamespace
     WHERE n.nspname = ${schema} AND NOT i.relispartition
    UNION ALL
    SELECT 'constraint', c.relname || '.' || k.conname,
           replace(pg_get_constraintdef(k.oid), quote_ident(n.nspname) || '.', '<schema>.')
      FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = ${schema} AND NOT c.relispartition
    UNION ALL
    SELECT 'function', p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
           -- Our sources name tables always quoted ("schema"."table").
           md5(replace(p.prosrc, '"' || replace(n.nspname, '"', '""') || '".', '<schema>.'))
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = ${schema}`

const drifts = (expected: ReadonlyArray<CatalogObject>, actual: ReadonlyArray<CatalogObject>) => {
  const key = (o: CatalogObject) => `${o.kind}:${o.object}`
  const found = new Map(actual.map((o) => [key(o), o]))
  const wanted = new Map(expected.map((o) => [key(o), o]))
  const result: Array<SchemaDrift> = []
  for (const want of expected) {
    const have = found.get(key(want))
    if (have === undefined) {
      result.push({
        kind: `missing-${want.kind}`,
        object: want.object,
        expected: want.definition || want.object,
        actual: null
      })
    } else if (have.definition !== want.definition) {
      const kind = want.kind === "column"
        ? "column-type"
        : `${want.kind as "index" | "constraint" | "function"}-definition` as const
      result.push({ kind, object: want.object, expected: want.definition, actual: have.definition })
    }
  }
  for (const have of actual) {
    // Tables and functions the migrations do not make are the user's business.
    if (have.kind !== "table" && have.kind !== "function" && !wanted.has(key(have))) {
      // Objects the migrations do not make, on tables they do (others are the user's business).
      const table = have.kind === "index" ? undefined : have.object.split(".")[0]
      if (table !== undefined && !wanted.has(`table:${table}`)) continue
      result.push({ kind: `unexpected-${have.kind}`, object: have.object, expected: null, actual: have.definition })
    }
  }
  return result
}

/**
 * Compares the schema with what the migrations build: the migrations are applied to a
 * scratch schema inside a transaction that is always rolled back, and the two catalogs are
 * compared. Needs the owner role (it runs DDL, never committed). A clean database gives `[]`.
 */
export const verify = (
  migrations: ReadonlyArray<Migration>,
  appliedVersions: Effect.Effect<ReadonlyArray<number>, DatabaseError, SqlClient.SqlClient | DurableSettings>
) =>
  Effect.gen(function*() {
    const latestVersion = migrations[migrations.length - 1]!.version
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const scratch = `effect_durable_verify_${randomBytes(6).toString("hex")}`
    const Rollback = Symbol("rollback")
    const [expected, actual] = yield* sql.withTransaction(
      Effect.gen(function*() {
        yield* sql.unsafe(`CREATE SCHEMA ${quote(scratch)}`)
        const qualify = (table: string) => `${quote(scratch)}.${quote(table)}`
        yield* sql.unsafe(historyTable(qualify("schema_migrations")))
        for (const migration of migrations) {
          for (const statement of migration.statements(qualify)) yield* sql.unsafe(statement)
        }
        const both = [yield* readCatalog(sql, scratch), yield* readCatalog(sql, settings.schema)] as const
        return yield* Effect.fail({ [Rollback]: both })
      })
    ).pipe(
      Effect.catchIf((e): e is { [Rollback]: readonly [ReadonlyArray<CatalogObject>, ReadonlyArray<CatalogObject>] } =>
        typeof e === "object" && e !== null && Rollback in e, (e) =>
        Effect.succeed(e[Rollback]))
    )
    if (actual.length === 0) {
      return [{ kind: "missing-schema", object: settings.schema, expected: settings.schema, actual: null }] as const
    }
    const versions = yield* appliedVersions
    const behind: Array<SchemaDrift> = versions.length === 0 || Math.max(...versions) < latestVersion
      ? [{
        kind: "version-behind",
        object: "schema_migrations",
        expected: String(latestVersion),
        actual: versions.length === 0 ? null : String(Math.max(...versions))
      }]
      : []
    return [...behind, ...drifts(expected, actual)]
  }).pipe(classifySqlErrors("Migrations.verifySchema"))
