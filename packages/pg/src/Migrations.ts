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
  },
  {
    version: 7,
    name: "claim functions",
    statements: (t) => [
      claimFunction(t, {
        name: "outbox_claim",
        table: "outbox",
        done: "projected_at",
        filterType: "text[]",
        // $4: the topics, or NULL for all. Per-key order: a keyed row is claimable only while
        // no earlier row of its key is open, and only among the first 1,000 claimable rows
        // (evaluated once, as an InitPlan, and only when a keyed row is met).
        filter: (c, table) =>
          `($4 IS NULL OR ${c}.topic = ANY($4))
           AND (${c}.ordering_key IS NULL OR (
             ${c}.id <= (SELECT max(w.id) FROM (
               SELECT w.id FROM ${table} w
                WHERE w.projected_at IS NULL AND w.dead_at IS NULL AND w.available_at <= now()
                  AND (w.claimed_until IS NULL OR w.claimed_until <= now()) AND ($4 IS NULL OR w.topic = ANY($4))
                ORDER BY w.id LIMIT 1000) w)
             AND NOT EXISTS (
               SELECT 1 FROM ${table} e
                WHERE e.ordering_key = ${c}.ordering_key AND e.ordering_key IS NOT NULL AND e.id < ${c}.id
                  AND e.projected_at IS NULL AND e.dead_at IS NULL)))`,
        returns: "topic text, ordering_key text, payload jsonb, headers jsonb, created_at text",
        returning: "q.topic, q.ordering_key, q.payload, q.headers, q.created_at::text"
      }),
      claimFunction(t, {
        name: "inbox_claim",
        table: "inbox",
        done: "processed_at",
        filterType: "text",
        // $4: the consumer.
        filter: (c) => `${c}.consumer = $4`,
        returns: "consumer text, message_id text, payload jsonb, headers jsonb, received_at text",
        returning: "q.consumer, q.message_id, q.payload, q.headers, q.received_at::text"
      })
    ]
  }
]

/**
 * A queue's claim as a function (version 7). PL/pgSQL keeps the plan of its query for the
 * session, and `force_generic_plan` makes it one plan for all arguments: a claim is neither
 * parsed nor planned per call, which on a small table was a third of its time. The query
 * is written so that its generic plan is the right one at any table size: rows are reached
 * by primary key (`id = ANY(ARRAY(...))`), never by a join whose strategy depends on the
 * batch's estimated share of the table. Arguments: $1 worker, $2 limit, $3 lease in
 * seconds, $4 the queue's filter. A row whose final attempt's lease expired (its worker
 * died) goes to the dead letters here, reported `exhausted`, instead of being handed out.
 */
const claimFunction = (t: (table: string) => string, spec: {
  readonly name: string
  readonly table: string
  readonly done: string
  readonly filterType: string
  readonly filter: (alias: string, table: string) => string
  readonly returns: string
  readonly returning: string
}) => {
  const table = t(spec.table)
  const exhausted = "q.attempt_count >= q.max_attempts"
  return `CREATE FUNCTION ${t(spec.name)}(text, integer, double precision, ${spec.filterType})
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean, ${spec.returns})
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
BEGIN
RETURN QUERY
${CLAIM_QUERY_START}
  SELECT c.id FROM ${table} c
   WHERE c.${spec.done} IS NULL AND c.dead_at IS NULL AND c.available_at <= now()
     AND (c.claimed_until IS NULL OR c.claimed_until <= now())
     AND ${spec.filter("c", table)}
   ORDER BY c.id
   LIMIT $2
   FOR UPDATE SKIP LOCKED)
UPDATE ${table} q SET
  claimed_by = CASE WHEN ${exhausted} THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN ${exhausted} THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN ${exhausted} THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN ${exhausted} THEN q.attempt_count ELSE q.attempt_count + 1 END,
  dead_at = CASE WHEN ${exhausted} THEN now() END,
  last_error = CASE WHEN ${exhausted} THEN concat_ws('; ', q.last_error, 'lease expired on the final attempt')
                    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT r.id FROM ready r))
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL, ${spec.returning}${CLAIM_QUERY_END}
END
$claim$`
}

/** How a claim function's query begins and ends in its source (see `claimQuery`). */
const CLAIM_QUERY_START = "WITH ready AS ("
const CLAIM_QUERY_END = ";"

/**
 * The query inside a claim function's source (`pg_proc.prosrc`), with its `$n` arguments:
 * what `explainClaim` prepares and explains, so the plan shown is the one the function runs.
 */
export const claimQuery = (source: string): string | undefined => {
  const start = source.indexOf(CLAIM_QUERY_START)
  const end = source.lastIndexOf(CLAIM_QUERY_END)
  return start < 0 || end < start ? undefined : source.slice(start, end)
}

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
    yield* sql.unsafe(`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${settings.quotedSchema} TO ${grantee}`)
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

interface CatalogObject {
  readonly kind: "table" | "column" | "index" | "constraint" | "function"
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
     WHERE n.nspname = ${schema}
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
      result.push({ kind: `missing-${want.kind}`, object: want.object, expected: want.definition || want.object, actual: null })
    } else if (have.definition !== want.definition) {
      const kind = want.kind === "column" ? "column-type" : `${want.kind as "index" | "constraint" | "function"}-definition` as const
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
