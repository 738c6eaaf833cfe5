/**
 * Adopting a schema that the pre-release numbering built (28 unpublished steps before the
 * baseline) as the baseline, in place, inside the migration's transaction: from pre-release
 * version 27 on its tables are the baseline's, so its rows stay; its functions are replaced by
 * the baseline's; its record is rewritten; and what the baseline builds is compared with it
 * before anything commits. An earlier version, or any difference, is refused naming it.
 */
import { SchemaVersionMismatch } from "@effect-durable/core/Errors"
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import type { Settings } from "../DurableConfig.js"
import type { Migration } from "../Migrations.js"
import { type Applied, checksumOf } from "./migrationHistory.js"
import { verify } from "./schemaDrift.js"

/** The first pre-release version whose tables are the baseline's (27 added the capacity slots). */
export const FIRST_ADOPTABLE = 27

/** The relation a statement creates (a table, an index, a view), if it creates one. */
const createdRelation = (statement: string) =>
  /^\s*CREATE (?:UNIQUE )?(?:TABLE|INDEX|VIEW) (?:"(?:[^"]|"")+"\.)?"?(\w+)"?/.exec(statement)?.[1]

/** A statement that creates a function (after any comment lines). */
const isFunction = (statement: string) => /^(\s*--[^\n]*\n)*\s*CREATE (OR REPLACE )?FUNCTION/.test(statement)

/** A statement that creates one of the feed's functions. */
const isFeedFunction = (statement: string) => /^\s*CREATE (OR REPLACE )?FUNCTION \S*"?feed_\w+"?\(/.test(statement)

export const adopt = (
  sql: SqlClient.SqlClient,
  settings: Settings,
  applied: ReadonlyArray<Applied>,
  baseline: Migration
) =>
  Effect.gen(function*() {
    const at = Math.max(...applied.map((row) => row.version))
    const refused = (detail: string) =>
      new SchemaVersionMismatch({
        schema: settings.schema,
        found: at,
        needed: baseline.version,
        prerelease: true,
        detail
      })
    if (at < FIRST_ADOPTABLE) {
      return yield* refused(
        `pre-release version ${at} predates the baseline's tables (${FIRST_ADOPTABLE} or later): migrate it to ` +
          `pre-release version 28 with the build that made it first`
      )
    }
    // The capacity a claim of before pre-release version 26 recorded, a row per message, joins the
    // claims' rows (the baseline's claims count only those); its table goes.
    const leases = settings.table("flow_leases")
    const [old] = yield* sql<{ present: boolean }>`SELECT to_regclass(${leases}) IS NOT NULL AS present`
    if (old?.present === true) {
      yield* sql.unsafe(`INSERT INTO ${settings.table("flow_claims")} (topic, group_key, entries, generations, taken)
        SELECT topic, group_key, array_agg(id), array_agg(generation), count(*) FROM ${leases} GROUP BY 1, 2`)
      yield* sql.unsafe(`DROP TABLE ${leases}`)
    }
    // The feed's positions: its functions first (the tables' defaults call them), then the open
    // table's column, at the end as in the baseline. Its messages take position 0 (before any
    // written from then on, in id order among themselves); the next enqueue takes its own.
    const outbox = settings.table("outbox")
    const statements = baseline.statements(settings.table)
    for (const statement of statements.filter((text) => createdRelation(text) === "feed_lineage")) {
      yield* sql.unsafe(statement)
    }
    for (const statement of statements.filter(isFeedFunction)) yield* sql.unsafe(statement)
    yield* sql.unsafe(`ALTER TABLE ${outbox} ADD COLUMN IF NOT EXISTS feed_position bigint NOT NULL DEFAULT 0`)
    yield* sql.unsafe(
      `ALTER TABLE ${outbox} ALTER COLUMN feed_position SET DEFAULT ${settings.table("feed_position")}()`
    )
    // The baseline's relations it lacks (the dead letters, the history by day, the view over
    // them) are made; its settled messages move out of the open table into them, as a settle
    // moves them now; and the open table's constraint and indexes become the baseline's.
    for (const statement of baseline.statements(settings.table)) {
      const relation = createdRelation(statement)
      if (relation === undefined) continue
      const [found] = yield* sql<{ present: boolean }>`
        SELECT to_regclass(${`${settings.quotedSchema}."${relation}"`}) IS NOT NULL AS present`
      if (found?.present !== true) yield* sql.unsafe(statement)
    }
    yield* sql.unsafe(`WITH m AS (DELETE FROM ${outbox} WHERE dead_at IS NOT NULL RETURNING *)
      INSERT INTO ${settings.table("outbox_dead")} SELECT * FROM m`)
    yield* sql.unsafe(`WITH m AS (DELETE FROM ${outbox} WHERE projected_at IS NOT NULL RETURNING *)
      INSERT INTO ${settings.table("outbox_history")} SELECT * FROM m`)
    yield* sql.unsafe(`ALTER TABLE ${outbox} DROP CONSTRAINT IF EXISTS outbox_final_state_check,
      ADD CONSTRAINT outbox_open_check CHECK (projected_at IS NULL AND dead_at IS NULL AND cancelled_at IS NULL)`)
    for (const index of ["outbox_dead_idx", "outbox_projected_at_idx"]) {
      yield* sql.unsafe(`DROP INDEX IF EXISTS ${settings.quotedSchema}."${index}"`)
    }
    // Its functions go: the baseline's replace them (a pre-release one may have another signature).
    // The feed's, made above, stay: the tables' defaults depend on them.
    const functions = yield* sql<{ fn: string }>`
      SELECT p.oid::regprocedure::text AS fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
       WHERE n.nspname = ${settings.schema} AND p.proname NOT LIKE 'feed\\_%'`
    for (const { fn } of functions) yield* sql.unsafe(`DROP FUNCTION ${fn}`)
    for (const statement of baseline.statements(settings.table).filter(isFunction)) yield* sql.unsafe(statement)
    const history = settings.table("schema_migrations")
    yield* sql.unsafe(`ALTER TABLE ${history} ADD COLUMN IF NOT EXISTS checksum text`)
    yield* sql`DELETE FROM ${sql.literal(history)}`
    yield* sql`INSERT INTO ${sql.literal(history)} (version, name, checksum)
               VALUES (${baseline.version}, ${baseline.name}, ${checksumOf(baseline)})`
    const drift = yield* verify([baseline], Effect.succeed([baseline.version]))
    if (drift.length > 0) {
      return yield* refused(
        `it differs from the baseline: ${drift.slice(0, 5).map((d) => `${d.kind} ${d.object}`).join(", ")}${
          drift.length > 5 ? ` and ${drift.length - 5} more` : ""
        }`
      )
    }
    yield* Effect.logInfo(
      `effect-durable: adopted the pre-release schema (version ${at}) as the baseline, version ${baseline.version}`
    ).pipe(Effect.annotateLogs({ schema: settings.schema }))
    return at
  })
