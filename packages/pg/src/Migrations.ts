/**
 * The substrate's schema, as numbered migrations embedded in this package (one module per
 * released version under `internal/migrations/`). `migrate` is idempotent and safe when
 * several processes run it at once: a transaction-scoped advisory lock lets one runner apply
 * each version, in one transaction with its record. Any earlier version is upgraded in
 * order. `verifySchema` reports drift from what the migrations build.
 *
 * @since 0.1.0
 */
import { type DatabaseError, type InvalidInput, SchemaVersionMismatch } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings, type Settings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import { released } from "./internal/migrations/index.js"
import { verify } from "./internal/schemaDrift.js"
import { quote } from "./internal/sqlText.js"
import { advisoryKey, lockForTransaction, transact } from "./internal/transaction.js"

export interface Migration {
  readonly version: number
  readonly name: string
  /** DDL statements; `t(name)` is the schema-qualified, quoted table name. */
  readonly statements: (t: (table: string) => string) => ReadonlyArray<string>
}

/** Every version, in order. Never edit a released one: add the next. */
export const migrations: ReadonlyArray<Migration> = Object.values(released).sort((a, b) => a.version - b.version)

export const latestVersion: number = migrations[migrations.length - 1]!.version

export interface MigrationReport {
  /** Versions this call applied (empty when another runner, or an earlier run, had). */
  readonly applied: ReadonlyArray<{ readonly version: number; readonly name: string }>
  /** The schema's version after the call. */
  readonly version: number
}

// A migration may wait behind another runner's long migration; the usual lock bound is too short.
const MIGRATION_LOCK_TIMEOUT = Duration.minutes(2)

const bootstrap = (sql: SqlClient.SqlClient, settings: Settings) =>
  Effect.gen(function*() {
    // CREATE SCHEMA checks the database-level CREATE right even with IF NOT EXISTS, so an
    // owner role without that right could not re-run migrate on an existing schema.
    const exists = yield* sql`SELECT 1 FROM pg_namespace WHERE nspname = ${settings.schema}`
    if (exists.length === 0) yield* sql.unsafe(`CREATE SCHEMA ${settings.quotedSchema}`)
    yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS ${settings.table("schema_migrations")} (
      version integer NOT NULL,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
    )`)
  })

/** Applies every missing version up to `upTo` (default: the latest). */
export const migrate = (
  options: { readonly upTo?: number } = {}
): Effect.Effect<MigrationReport, DatabaseError, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const upTo = options.upTo ?? latestVersion
    const body = Effect.gen(function*() {
      yield* lockForTransaction(
        sql,
        { ...settings, lockTimeout: MIGRATION_LOCK_TIMEOUT },
        advisoryKey("effect-durable/migrate", settings.schema),
        true
      )
      yield* bootstrap(sql, settings)
      const done = yield* sql<{ version: number }>`SELECT version FROM ${
        sql.literal(settings.table("schema_migrations"))
      }`
      const appliedBefore = new Set(done.map((row) => row.version))
      const pending = migrations.filter((m) => m.version <= upTo && !appliedBefore.has(m.version))
      for (const migration of pending) {
        for (const statement of migration.statements(settings.table)) yield* sql.unsafe(statement)
        yield* sql`INSERT INTO ${sql.literal(settings.table("schema_migrations"))} (version, name)
                   VALUES (${migration.version}, ${migration.name})`
        yield* Effect.logInfo(`effect-durable: applied migration ${migration.version} (${migration.name})`).pipe(
          Effect.annotateLogs({ schema: settings.schema })
        )
      }
      const version = Math.max(0, ...appliedBefore, ...pending.map((m) => m.version))
      // Roles granted runtime access get what every version made, this run's included (the
      // list exists from version 8 on). Cheap, and it repairs a grant revoked by hand.
      if (version >= 8) {
        const roles = yield* sql<{ role: string }>`SELECT role FROM ${sql.literal(settings.table("runtime_roles"))}`
        for (const { role } of roles) {
          for (const grant of yield* runtimeGrants(sql, settings, role)) yield* sql.unsafe(grant)
        }
      }
      return { applied: pending.map(({ name, version }) => ({ version, name })), version }
    }).pipe(classifySqlErrors("Migrations.migrate"))
    return yield* transact(sql, "Migrations.migrate", body)
  }).pipe(Effect.withSpan("Migrations.migrate"))

/**
 * The versions recorded in the schema (empty when it was never migrated). The table is looked
 * up first rather than its absence caught: a failed statement would leave a caller's
 * transaction aborted.
 */
export const appliedVersions: Effect.Effect<
  ReadonlyArray<number>,
  DatabaseError,
  SqlClient.SqlClient | DurableSettings
> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const settings = yield* DurableSettings
  const history = settings.table("schema_migrations")
  const [found] = yield* sql<{ present: boolean }>`SELECT to_regclass(${history}) IS NOT NULL AS present`
  if (found?.present !== true) return []
  const rows = yield* sql<{ version: number }>`SELECT version FROM ${sql.literal(history)} ORDER BY version`
  return rows.map((row) => row.version)
}).pipe(classifySqlErrors("Migrations.appliedVersions"))

/** The schema's recorded version (0: never migrated) beside the one this code needs. */
export const schemaVersion: Effect.Effect<
  { readonly schema: string; readonly found: number; readonly needed: number },
  DatabaseError,
  SqlClient.SqlClient | DurableSettings
> = Effect.gen(function*() {
  const settings = yield* DurableSettings
  const versions = yield* appliedVersions
  return { schema: settings.schema, found: versions.length === 0 ? 0 : Math.max(...versions), needed: latestVersion }
})

/** The schema is at the version this code needs, or `SchemaVersionMismatch` (older: migrate; newer: a rollback). */
export const checkSchemaVersion: Effect.Effect<
  void,
  SchemaVersionMismatch | DatabaseError,
  SqlClient.SqlClient | DurableSettings
> = Effect.flatMap(
  schemaVersion,
  (version) => version.found === version.needed ? Effect.void : Effect.fail(new SchemaVersionMismatch(version))
)

const decodeRole = Input.argument("role", Input.Identifier)

/** Tables the runtime only reads: the migration history and the list of runtime roles. */
const READ_ONLY_TABLES = ["schema_migrations", "runtime_roles"] as const

/**
 * The statements that give `role` exactly what the runtime uses: the substrate's operations
 * write every table of the schema but the read-only ones. The tables are read from the schema
 * itself, not from a list kept beside the migrations, so a table a migration adds is granted
 * with no second place to remember.
 */
const runtimeGrants = (sql: SqlClient.SqlClient, settings: Settings, role: string) =>
  Effect.gen(function*() {
    const written = yield* sql<{ name: string }>`
      SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = ${settings.schema} AND c.relkind IN ('r', 'p') AND NOT c.relispartition
         AND c.relname NOT IN ${sql.in(READ_ONLY_TABLES)}
       ORDER BY c.relname`
    const grantee = quote(role)
    const tables = (names: ReadonlyArray<string>) => names.map(settings.table).join(", ")
    return [
      `GRANT USAGE ON SCHEMA ${settings.quotedSchema} TO ${grantee}`,
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${tables(written.map((row) => row.name))} TO ${grantee}`,
      `GRANT SELECT ON ${tables(READ_ONLY_TABLES)} TO ${grantee}`,
      `GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ${settings.quotedSchema} TO ${grantee}`,
      `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${settings.quotedSchema} TO ${grantee}`
    ]
  })

/**
 * Grants a runtime role what the substrate's operations need and nothing more: `USAGE` on
 * the schema, `SELECT, INSERT, UPDATE, DELETE` on the tables it writes, `SELECT` only on the
 * migration history, `EXECUTE` on its functions. The role is remembered: later migrations
 * grant it what they add. Run it as the owner role, after the migrations; the role must exist
 * (`CREATE ROLE app_runtime LOGIN PASSWORD '...'`).
 */
export const grantRuntimeAccess = (
  role: string
): Effect.Effect<void, DatabaseError | InvalidInput, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const decoded = yield* decodeRole(role)
    yield* transact(
      sql,
      "Migrations.grantRuntimeAccess",
      Effect.gen(function*() {
        for (const grant of yield* runtimeGrants(sql, settings, decoded)) yield* sql.unsafe(grant)
        yield* sql`INSERT INTO ${sql.literal(settings.table("runtime_roles"))} (role) VALUES (${decoded})
                   ON CONFLICT (role) DO NOTHING`
      }).pipe(classifySqlErrors("Migrations.grantRuntimeAccess"))
    )
  }).pipe(Effect.withSpan("Migrations.grantRuntimeAccess"))

/** One difference between the database and what the migrations build. */
export interface SchemaDrift {
  readonly kind:
    | "missing-schema"
    | "version-behind"
    | "missing-table"
    | "missing-column"
    | "column-type"
    | "missing-index"
    | "index-definition"
    | "missing-constraint"
    | "constraint-definition"
    | "missing-function"
    | "function-definition"
    | "unexpected-column"
    | "unexpected-index"
    | "unexpected-constraint"
  /** `table`, `table.column`, or the index / constraint name. */
  readonly object: string
  readonly expected: string | null
  readonly actual: string | null
}

/**
 * Compares the schema with what the migrations build: the migrations are applied to a
 * scratch schema inside a transaction that is always rolled back, and the two catalogs are
 * compared. Needs the owner role (it runs DDL, never committed). A clean database gives `[]`.
 */
export const verifySchema: Effect.Effect<
  ReadonlyArray<SchemaDrift>,
  DatabaseError,
  SqlClient.SqlClient | DurableSettings
> = verify(migrations, appliedVersions).pipe(Effect.withSpan("Migrations.verifySchema"))
