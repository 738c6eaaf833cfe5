/**
 * The substrate's schema, as numbered migrations embedded in this package (one module per
 * version under `internal/migrations/`, the first the baseline). `migrate` is idempotent and
 * safe when several processes run it at once: a transaction-scoped advisory lock lets one
 * runner apply each version, in one transaction with its record and its checksum. Any earlier
 * version is upgraded in order; a schema the pre-release numbering built is adopted as the
 * baseline. At start `checkSchemaVersion` refuses a schema behind or ahead of the code, or one
 * that applied a version from other DDL (a checksum that differs). `verifySchema` reports
 * drift from what the migrations build, object by object.
 *
 * @since 0.1.0
 */
import { type DatabaseError, type InvalidInput, SchemaVersionMismatch } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings, type Settings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import { adopt } from "./internal/adoption.js"
import { checksumOf, historyTable, isPrerelease, readApplied } from "./internal/migrationHistory.js"
import { RELEASED_THROUGH, versions } from "./internal/migrations/index.js"
import { verify } from "./internal/schemaDrift.js"
import { quote } from "./internal/sqlText.js"
import { advisoryKey, lockForTransaction, transact } from "./internal/transaction.js"

export interface Migration {
  readonly version: number
  readonly name: string
  /** DDL statements; `t(name)` is the schema-qualified, quoted table name. */
  readonly statements: (t: (table: string) => string) => ReadonlyArray<string>
}

/** Every version, in order. Never edit a released one (at or below `releasedThrough`): add the next. */
export const migrations: ReadonlyArray<Migration> = versions

/** The last released version: its text and those before it are frozen (0: none released yet). */
export const releasedThrough: number = RELEASED_THROUGH

/** A version's checksum, as `schema_migrations` records it: SHA-256 of its DDL, written for a fixed schema. */
export const checksum: (migration: Migration) => string = checksumOf

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
    yield* sql.unsafe(historyTable(settings.table("schema_migrations")))
  })

/**
 * Applies every missing version up to `upTo` (default: the latest). A schema the pre-release
 * numbering built (from its version 27 on) is first adopted as the baseline, in place
 * (`SchemaVersionMismatch` when it cannot be: an earlier version, or tables that differ).
 */
export const migrate = (
  options: { readonly upTo?: number } = {}
): Effect.Effect<MigrationReport, DatabaseError | SchemaVersionMismatch, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const upTo = options.upTo ?? latestVersion
    const body = Effect.gen(function*() {
      // DDL is bounded by its lock waits (two minutes), not by the operations' statement
      // timeout: the baseline and the history's days ahead (seven tables made and attached)
      // take longer than a latency budget of 150 ms on a loaded machine, and a migration cut
      // half-way is only retried from the start.
      yield* lockForTransaction(
        sql,
        { lockTimeout: MIGRATION_LOCK_TIMEOUT, statementTimeout: Option.none() },
        advisoryKey("effect-durable/migrate", settings.schema),
        true
      )
      yield* bootstrap(sql, settings)
      const history = settings.table("schema_migrations")
      let done = yield* readApplied(sql, settings.schema, history)
      if (isPrerelease(done)) {
        yield* adopt(sql, settings, done, migrations[0]!)
        done = yield* readApplied(sql, settings.schema, history)
      }
      const appliedBefore = new Set(done.map((row) => row.version))
      const pending = migrations.filter((m) => m.version <= upTo && !appliedBefore.has(m.version))
      for (const migration of pending) {
        for (const statement of migration.statements(settings.table)) yield* sql.unsafe(statement)
        yield* sql`INSERT INTO ${sql.literal(history)} (version, name, checksum)
                   VALUES (${migration.version}, ${migration.name}, ${checksumOf(migration)})`
        yield* Effect.logInfo(`effect-durable: applied migration ${migration.version} (${migration.name})`).pipe(
          Effect.annotateLogs({ schema: settings.schema })
        )
      }
      const version = Math.max(0, ...appliedBefore, ...pending.map((m) => m.version))
      // Roles granted runtime access get what every version made, this run's included (the
      // list exists from the baseline on). Cheap, and it repairs a grant revoked by hand.
      if (version >= 1) {
        const roles = yield* sql<{ role: string }>`SELECT role FROM ${sql.literal(settings.table("runtime_roles"))}`
        for (const { role } of roles) {
          for (const grant of yield* runtimeGrants(sql, settings, role)) yield* sql.unsafe(grant)
        }
        // The outbox history's days ahead (retention makes them too).
        yield* sql`SELECT ${sql.literal(settings.table("outbox_history_prepare"))}(7)`
      }
      return { applied: pending.map(({ name, version }) => ({ version, name })), version }
    }).pipe(classifySqlErrors("Migrations.migrate"))
    return yield* transact(sql, "Migrations.migrate", body)
  }).pipe(Effect.withSpan("Migrations.migrate"))

const applied = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const settings = yield* DurableSettings
  return yield* readApplied(sql, settings.schema, settings.table("schema_migrations"))
}).pipe(classifySqlErrors("Migrations.appliedVersions"))

/**
 * The versions recorded in the schema, in this code's numbering (empty when it was never
 * migrated, and for a schema of the pre-release numbering: none of its versions is one of these).
 */
export const appliedVersions: Effect.Effect<
  ReadonlyArray<number>,
  DatabaseError,
  SqlClient.SqlClient | DurableSettings
> = Effect.map(applied, (rows) => isPrerelease(rows) ? [] : rows.map((row) => row.version))

export interface SchemaVersion {
  readonly schema: string
  /** The latest version recorded (0: never migrated); for a pre-release schema, in its numbering. */
  readonly found: number
  readonly needed: number
  /** Versions applied from other DDL than this code's (their checksums differ). */
  readonly changed: ReadonlyArray<{ readonly version: number; readonly name: string }>
  /** Built by the pre-release numbering: `migrate` adopts it. */
  readonly prerelease: boolean
}

/** The schema's recorded version beside the one this code needs, and the versions whose DDL changed. */
export const schemaVersion: Effect.Effect<SchemaVersion, DatabaseError, SqlClient.SqlClient | DurableSettings> = Effect
  .gen(function*() {
    const settings = yield* DurableSettings
    const rows = yield* applied
    const prerelease = isPrerelease(rows)
    const byVersion = new Map(migrations.map((m) => [m.version, m] as const))
    const changed = prerelease ? [] : rows.flatMap((row) => {
      const migration = byVersion.get(row.version)
      return migration !== undefined && row.checksum !== null && row.checksum !== checksumOf(migration)
        ? [{ version: row.version, name: row.name }]
        : []
    })
    return {
      schema: settings.schema,
      found: rows.length === 0 ? 0 : Math.max(...rows.map((row) => row.version)),
      needed: latestVersion,
      changed,
      prerelease
    }
  })

/**
 * The schema is what this code needs, or `SchemaVersionMismatch`: behind (migrate), ahead (a
 * rolled-back deploy), built by the pre-release numbering (migrate adopts it), or a version
 * applied from other DDL than this code's (named).
 */
export const checkSchemaVersion: Effect.Effect<
  void,
  SchemaVersionMismatch | DatabaseError,
  SqlClient.SqlClient | DurableSettings
> = Effect.flatMap(
  schemaVersion,
  (version) =>
    version.found === version.needed && !version.prerelease && version.changed.length === 0
      ? Effect.void
      : Effect.fail(
        new SchemaVersionMismatch({
          schema: version.schema,
          found: version.found,
          needed: version.needed,
          ...(version.changed.length > 0 ? { changed: version.changed } : {}),
          ...(version.prerelease ? { prerelease: true } : {})
        })
      )
)

const decodeRole = Input.argument("role", Input.Identifier)

/** Tables the runtime only reads: the migration history and the list of runtime roles. */
const READ_ONLY_TABLES = ["schema_migrations", "runtime_roles", "feed_lineage"] as const

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
       WHERE n.nspname = ${settings.schema} AND c.relkind IN ('r', 'p', 'v') AND NOT c.relispartition
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
