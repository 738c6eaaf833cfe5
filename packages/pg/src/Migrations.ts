/**
 * The substrate's schema, as numbered migrations embedded in this package. `migrate` is
 * idempotent and safe when several processes run it at once: a transaction-scoped advisory
 * lock lets one runner apply each version, in one transaction with its record. Any earlier
 * version is upgraded in order. `verifySchema` reports drift from what the migrations build.
 *
 * @since 0.1.0
 */
import type { DatabaseError, DurableConfigError } from "@effect-durable/core/Errors"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { randomBytes } from "node:crypto"
import { DurableSettings, type Settings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import { quote, validateIdentifier } from "./internal/identifiers.js"
import { advisoryKey, lockForTransaction, transact } from "./internal/transaction.js"

export interface Migration {
  readonly version: number
  readonly name: string
  /** DDL statements; `t(name)` is the schema-qualified, quoted table name. */
  readonly statements: (t: (table: string) => string) => ReadonlyArray<string>
}

/** Every version, in order. Never edit a released one: add the next. */
export const migrations: ReadonlyArray<Migration> = [
  {
    version: 1,
    name: "mutation ledger",
    statements: (t) => [
      `CREATE TABLE ${t("mutation_records")} (
        subject text NOT NULL,
        operation text NOT NULL,
        key text NOT NULL,
        kind text NOT NULL,
        eligibility bytea NOT NULL,
        request_fingerprint bytea NOT NULL,
        status text NOT NULL,
        response jsonb NOT NULL,
        effect_applied boolean GENERATED ALWAYS AS (status = 'accepted') STORED,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT mutation_records_pkey PRIMARY KEY (subject, operation, key),
        CONSTRAINT mutation_records_status_check CHECK (status IN ('accepted', 'rejected')),
        CONSTRAINT mutation_records_fingerprint_length CHECK (octet_length(request_fingerprint) = 32)
      )`
    ]
  },
  {
    version: 2,
    name: "mutation ledger retention index",
    statements: (t) => [
      `CREATE INDEX mutation_records_created_at_idx ON ${t("mutation_records")} (created_at)`
    ]
  },
  {
    version: 3,
    name: "transactional outbox",
    statements: (t) => [
      `CREATE TABLE ${t("outbox")} (
        id bigint GENERATED ALWAYS AS IDENTITY,
        topic text NOT NULL,
        ordering_key text,
        payload jsonb NOT NULL,
        headers jsonb NOT NULL DEFAULT '{}',
        created_at timestamptz NOT NULL DEFAULT now(),
        available_at timestamptz NOT NULL DEFAULT now(),
        claimed_by text,
        claimed_until timestamptz,
        claim_generation bigint NOT NULL DEFAULT 0,
        attempt_count integer NOT NULL DEFAULT 0,
        max_attempts integer NOT NULL DEFAULT 25,
        projected_at timestamptz,
        dead_at timestamptz,
        last_error text,
        CONSTRAINT outbox_pkey PRIMARY KEY (id),
        CONSTRAINT outbox_max_attempts_check CHECK (max_attempts > 0),
        CONSTRAINT outbox_final_state_check CHECK (projected_at IS NULL OR dead_at IS NULL)
      )`,
      // The claim walks this index in id order: it holds only open rows, so a claim costs
      // O(batch) however many projected rows wait for purge.
      `CREATE INDEX outbox_open_idx ON ${t("outbox")} (id) WHERE projected_at IS NULL AND dead_at IS NULL`,
      `CREATE INDEX outbox_projected_at_idx ON ${t("outbox")} (projected_at) WHERE projected_at IS NOT NULL`,
      `CREATE INDEX outbox_dead_idx ON ${t("outbox")} (id) WHERE dead_at IS NOT NULL`
    ]
  },
  {
    version: 4,
    name: "transactional inbox",
    statements: (t) => [
      `CREATE TABLE ${t("inbox")} (
        id bigint GENERATED ALWAYS AS IDENTITY,
        consumer text NOT NULL,
        message_id text NOT NULL,
        payload jsonb,
        headers jsonb NOT NULL DEFAULT '{}',
        received_at timestamptz NOT NULL DEFAULT now(),
        available_at timestamptz NOT NULL DEFAULT now(),
        claimed_by text,
        claimed_until timestamptz,
        claim_generation bigint NOT NULL DEFAULT 0,
        attempt_count integer NOT NULL DEFAULT 0,
        max_attempts integer NOT NULL DEFAULT 25,
        processed_at timestamptz,
        dead_at timestamptz,
        last_error text,
        CONSTRAINT inbox_pkey PRIMARY KEY (id),
        CONSTRAINT inbox_receipt_key UNIQUE (consumer, message_id),
        CONSTRAINT inbox_max_attempts_check CHECK (max_attempts > 0),
        CONSTRAINT inbox_final_state_check CHECK (processed_at IS NULL OR dead_at IS NULL)
      )`,
      `CREATE INDEX inbox_open_idx ON ${t("inbox")} (consumer, id) WHERE processed_at IS NULL AND dead_at IS NULL`,
      `CREATE INDEX inbox_processed_at_idx ON ${t("inbox")} (processed_at) WHERE processed_at IS NOT NULL`,
      `CREATE INDEX inbox_dead_idx ON ${t("inbox")} (id) WHERE dead_at IS NOT NULL`
    ]
  },
  {
    version: 5,
    name: "outbox per-key order",
    statements: (t) => [
      // A claim hands out a keyed message only when no earlier message of its key is open;
      // this index answers that question in one probe.
      `CREATE INDEX outbox_open_key_idx ON ${t("outbox")} (ordering_key, id)
         WHERE ordering_key IS NOT NULL AND projected_at IS NULL AND dead_at IS NULL`
    ]
  },
  {
    version: 6,
    name: "room for in-place claims",
    statements: (t) => [
      // A claim rewrites its rows without touching an indexed column: with room left on the
      // row's page PostgreSQL updates it in place (HOT) and writes no index entry, about a
      // quarter of the server's work per delivered message. Half of every page written
      // from now on is left free for that.
      `ALTER TABLE ${t("outbox")} SET (fillfactor = 50)`,
      `ALTER TABLE ${t("inbox")} SET (fillfactor = 50)`
    ]
  }
]

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
      const done = yield* sql<{ version: number }>`SELECT version FROM ${sql.literal(settings.table("schema_migrations"))}`
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
      return { applied: pending.map(({ name, version }) => ({ version, name })), version }
    }).pipe(classifySqlErrors("Migrations.migrate"))
    return yield* transact(sql, "Migrations.migrate", body)
  }).pipe(Effect.withSpan("Migrations.migrate"))

/** The versions recorded in the schema (empty when it was never migrated). */
export const appliedVersions: Effect.Effect<ReadonlyArray<number>, DatabaseError, SqlClient.SqlClient | DurableSettings> =
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const rows = yield* sql<{ version: number }>`SELECT version FROM ${
      sql.literal(settings.table("schema_migrations"))
    } ORDER BY version`.pipe(
      // undefined_table or invalid_schema_name: never migrated.
      Effect.catchIf(
        (error) => ["42P01", "3F000"].includes((error.cause as { code?: string })?.code ?? ""),
        () => Effect.succeed([])
      )
    )
    return rows.map((row) => row.version)
  }).pipe(classifySqlErrors("Migrations.appliedVersions"))

/**
 * Grants a runtime role what the substrate's operations need and nothing more: `USAGE` on
 * the schema and `SELECT, INSERT, UPDATE, DELETE` on its tables. Run it as the owner role.
 */
export const grantRuntimeAccess = (
  role: string
): Effect.Effect<void, DatabaseError | DurableConfigError, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const grantee = quote(yield* validateIdentifier("role", role))
    yield* sql.unsafe(`GRANT USAGE ON SCHEMA ${settings.quotedSchema} TO ${grantee}`)
    yield* sql.unsafe(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${settings.quotedSchema} TO ${grantee}`)
    yield* sql.unsafe(`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ${settings.quotedSchema} TO ${grantee}`)
  }).pipe(classifySqlErrors("Migrations.grantRuntimeAccess"))

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
    | "unexpected-column"
    | "unexpected-index"
    | "unexpected-constraint"
  /** `table`, `table.column`, or the index / constraint name. */
  readonly object: string
  readonly expected: string | null
  readonly actual: string | null
}

interface CatalogObject {
  readonly kind: "table" | "column" | "index" | "constraint"
  readonly object: string
  readonly definition: string
}

// Schema names are replaced by a placeholder so definitions compare across schemas.
const readCatalog = (sql: SqlClient.SqlClient, schema: string) =>
  sql<CatalogObject>`
    SELECT 'table' AS kind, c.relname AS object, '' AS definition
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = ${schema} AND c.relkind IN ('r', 'p')
    UNION ALL
    SELECT 'column', c.relname || '.' || a.attname,
           format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
             || CASE WHEN a.attgenerated = 's' THEN ' GENERATED ' || pg_get_expr(d.adbin, d.adrelid) ELSE '' END
      FROM pg_attribute a
      JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE n.nspname = ${schema} AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'index', i.relname, replace(pg_get_indexdef(i.oid), quote_ident(n.nspname) || '.', '<schema>.')
      FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_namespace n ON n.oid = i.relnamespace
     WHERE n.nspname = ${schema}
    UNION ALL
    SELECT 'constraint', c.relname || '.' || k.conname,
           replace(pg_get_constraintdef(k.oid), quote_ident(n.nspname) || '.', '<schema>.')
      FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = ${schema}`

const drifts = (expected: ReadonlyArray<CatalogObject>, actual: ReadonlyArray<CatalogObject>) => {
  const key = (o: CatalogObject) => `${o.kind}:${o.object}`
  const found = new Map(actual.map((o) => [key(o), o]))
  const wanted = new Map(expected.map((o) => [key(o), o]))
  const result: Array<SchemaDrift> = []
  for (const want of expected) {
    const have = found.get(key(want))
    if (have === undefined) {
      result.push({ kind: `missing-${want.kind}`, object: want.object, expected: want.definition || want.object, actual: null })
    } else if (have.definition !== want.definition) {
      const kind = want.kind === "column" ? "column-type" : `${want.kind as "index" | "constraint"}-definition` as const
      result.push({ kind, object: want.object, expected: want.definition, actual: have.definition })
    }
  }
  for (const have of actual) {
    if (have.kind !== "table" && !wanted.has(key(have))) {
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
export const verifySchema: Effect.Effect<ReadonlyArray<SchemaDrift>, DatabaseError, SqlClient.SqlClient | DurableSettings> =
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const scratch = `effect_durable_verify_${randomBytes(6).toString("hex")}`
    const Rollback = Symbol("rollback")
    const [expected, actual] = yield* sql.withTransaction(
      Effect.gen(function*() {
        yield* sql.unsafe(`CREATE SCHEMA ${quote(scratch)}`)
        const qualify = (table: string) => `${quote(scratch)}.${quote(table)}`
        yield* sql.unsafe(`CREATE TABLE ${qualify("schema_migrations")} (
          version integer NOT NULL, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(),
          CONSTRAINT schema_migrations_pkey PRIMARY KEY (version))`)
        for (const migration of migrations) {
          for (const statement of migration.statements(qualify)) yield* sql.unsafe(statement)
        }
        const both = [yield* readCatalog(sql, scratch), yield* readCatalog(sql, settings.schema)] as const
        return yield* Effect.fail({ [Rollback]: both })
      })
    ).pipe(Effect.catchIf((e): e is { [Rollback]: readonly [ReadonlyArray<CatalogObject>, ReadonlyArray<CatalogObject>] } =>
      typeof e === "object" && e !== null && Rollback in e, (e) => Effect.succeed(e[Rollback])))
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
  }).pipe(classifySqlErrors("Migrations.verifySchema"), Effect.withSpan("Migrations.verifySchema"))
