/**
 * What the catalog says about a traversal's columns, read once per (schema, table, order
 * column, tie-breaker) and kept for the life of the layer: their types (through domains), that
 * both are NOT NULL, how long their text can be by their type or a validated CHECK constraint
 * (so a cursor carries any row's position whole) and that
 * the tie-breaker has a unique index of its own. A traversal the catalog cannot
 * support is refused before its first page; refusals are not kept (a migration may fix them).
 */
import * as Cursor from "@effect-durable/core/Cursor"
import { type DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Cache from "effect/Cache"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schema from "effect/Schema"
import type * as SqlClient from "effect/sql/SqlClient"
import { classifySqlErrors } from "../../ErrorClassification.js"
import { decodeRows } from "../rows.js"
import { quote } from "../sqlText.js"
import { checkBound } from "./bounds.js"
import { isPositionType, POSITION_TYPES_SHOWN, positionBytes, type PositionType, TEXT_TYPES } from "./positions.js"

/** Which table and columns a traversal reads; identifiers already validated. */
export interface Target {
  readonly schema: string | null
  readonly table: string
  readonly column: string
  readonly tieBreaker: string
}

export interface Column {
  readonly name: string
  readonly type: PositionType
  /** The type a position text is cast back to, as SQL writes it (`varchar`, `"public"."citext"`). */
  readonly cast: string
  /** The type as PostgreSQL shows it, `varchar(64)`. */
  readonly shown: string
  /**
   * The most bytes its position takes in a cursor, by its type or a validated CHECK constraint;
   * `undefined` for a text column nothing bounds, which pages only with a bound the caller
   * declares (`order.maxLength`).
   */
  readonly bytes: number | undefined
}

/** A traversal the catalog supports. */
export interface Layout {
  /** The quoted, possibly schema-qualified table name. */
  readonly relation: string
  readonly column: Column
  readonly tieBreaker: Column
}

// One row per column found; one row with `name` NULL when none is (and `found` false when
// the table itself is missing). Aliases are single lowercase words: a client's result-name
// transform leaves them as they are.
const CatalogRow = Schema.Struct({
  found: Schema.Boolean,
  name: Schema.NullOr(Schema.String),
  quoted: Schema.NullOr(Schema.String),
  base: Schema.NullOr(Schema.String),
  cast: Schema.NullOr(Schema.String),
  shown: Schema.NullOr(Schema.String),
  typmod: Schema.NullOr(Schema.Number),
  required: Schema.NullOr(Schema.Boolean),
  uniquealone: Schema.NullOr(Schema.Boolean),
  checks: Schema.NullOr(Schema.Array(Schema.String))
})
type CatalogRow = typeof CatalogRow.Type

const refuse = (argument: string, rule: string) => Effect.fail(new InvalidInput({ argument, rule }))

const checkColumn = (
  argument: "order.column" | "order.tieBreaker",
  relation: string,
  name: string,
  rows: ReadonlyArray<CatalogRow>
): Effect.Effect<Column, InvalidInput> => {
  const row = rows.find((row) => row.name === name)
  if (row === undefined) return refuse(argument, `a column of ${relation} (it has no column ${name})`)
  if (row.base === null || !isPositionType(row.base)) {
    return refuse(
      argument,
      `a column of a type positions can carry exactly (${POSITION_TYPES_SHOWN}); ${name} is ${row.shown}`
    )
  }
  const type = row.base
  const checked = TEXT_TYPES.includes(type)
    ? checkBound(row.checks ?? [], [row.quoted ?? name, "VALUE"])
    : undefined
  const byType = positionBytes(type, row.typmod ?? -1)
  const bytes = [byType, checked === undefined ? undefined : checked * Cursor.MAX_BYTES_PER_CHARACTER]
    .filter((n): n is number => n !== undefined)
  if (bytes.length === 0 && !TEXT_TYPES.includes(type)) {
    return refuse(
      argument,
      `a column whose type bounds its values' length, so that a cursor carries any row's position whole (${name} is ${row.shown}, which holds values of any length: make it numeric(p, s))`
    )
  }
  if (row.required !== true) {
    return refuse(argument, `a NOT NULL column (${name} may hold NULL, which has no place in the order)`)
  }
  if (argument === "order.tieBreaker" && row.uniquealone !== true) {
    return refuse(
      argument,
      `a column with a unique index of its own, so that it breaks every tie (${name} has no unique index on it alone, without a predicate)`
    )
  }
  return Effect.succeed({
    name,
    type,
    cast: row.cast ?? type,
    shown: row.shown ?? type,
    bytes: bytes.length === 0 ? undefined : Math.min(...bytes)
  })
}

const lookup = (sql: SqlClient.SqlClient, target: Target): Effect.Effect<Layout, InvalidInput | DatabaseError> => {
  const relation = target.schema === null ? quote(target.table) : `${quote(target.schema)}.${quote(target.table)}`
  // A domain is read through to its base type (domains over domains too): the base's name and
  // type modifier (the nearest one set), and the validated CHECK constraints of the column and
  // of every domain on the way. NOT NULL is the column's own: a domain's lets a NULL through
  // (a scalar subquery that finds no row).
  return sql`
    SELECT r.relid IS NOT NULL AS found,
           a.attname::text AS name,
           quote_ident(a.attname) AS quoted,
           CASE WHEN bt.typnamespace = 'pg_catalog'::regnamespace OR bt.typname = 'citext'
                THEN bt.typname::text END AS base,
           CASE WHEN bt.typnamespace = 'pg_catalog'::regnamespace THEN bt.typname::text
                ELSE quote_ident(bn.nspname) || '.' || quote_ident(bt.typname) END AS cast,
           format_type(a.atttypid, a.atttypmod) AS shown,
           b.typmod,
           a.attnotnull AS required,
           EXISTS (SELECT FROM pg_index i
                    WHERE i.indrelid = a.attrelid AND i.indisunique AND i.indisvalid
                      AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum
                      AND i.indpred IS NULL AND i.indexprs IS NULL) AS uniquealone,
           ARRAY(SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
                  WHERE c.contype = 'c' AND c.convalidated AND NOT c.connoinherit
                    AND ((c.conrelid = a.attrelid AND c.conkey = ARRAY[a.attnum]) OR c.contypid = ANY(b.domains))
                  ORDER BY c.oid) AS checks
      FROM (SELECT to_regclass(${relation}) AS relid) r
      LEFT JOIN pg_attribute a
             ON a.attrelid = r.relid AND a.attname IN (${target.column}, ${target.tieBreaker})
            AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN LATERAL (
        WITH RECURSIVE chain AS (
          SELECT t.oid, t.typtype, t.typbasetype, t.typtypmod, t.typnotnull, a.atttypmod AS typmod, 0 AS depth
            FROM pg_type t WHERE t.oid = a.atttypid
          UNION ALL
          SELECT t.oid, t.typtype, t.typbasetype, t.typtypmod, t.typnotnull,
                 CASE WHEN c.typmod <> -1 THEN c.typmod ELSE c.typtypmod END, c.depth + 1
            FROM chain c JOIN pg_type t ON t.oid = c.typbasetype
           WHERE c.typtype = 'd' AND c.depth < 32)
        SELECT (SELECT c.oid FROM chain c WHERE c.typtype <> 'd') AS base,
               (SELECT c.typmod FROM chain c WHERE c.typtype <> 'd') AS typmod,
               ARRAY(SELECT c.oid FROM chain c WHERE c.typtype = 'd') AS domains
      ) b ON a.attname IS NOT NULL
      LEFT JOIN pg_type bt ON bt.oid = b.base
      LEFT JOIN pg_namespace bn ON bn.oid = bt.typnamespace`.pipe(
    decodeRows(CatalogRow),
    classifySqlErrors("Keyset.page"),
    Effect.flatMap((rows) =>
      rows[0]?.found !== true
        ? refuse("table", `a table this session can see (there is no ${relation})`)
        : Effect.all({
          relation: Effect.succeed(relation),
          column: checkColumn("order.column", relation, target.column, rows),
          tieBreaker: checkColumn("order.tieBreaker", relation, target.tieBreaker, rows)
        })
    )
  )
}

/** Kept layouts at most; a service pages over a handful of tables, not thousands. */
const CAPACITY = 1024

/** The catalog of one `Keyset` service: layouts looked up once, refusals looked up again. */
export const make = (sql: SqlClient.SqlClient) =>
  Effect.map(
    Cache.makeWith((target: Target) => lookup(sql, target), {
      capacity: CAPACITY,
      timeToLive: Exit.match({ onFailure: () => Duration.zero, onSuccess: () => Duration.infinity })
    }),
    (cache) => ({
      // A plain record as the key: Effect 4 compares and hashes records by their fields.
      layout: ({ column, schema, table, tieBreaker }: Target): Effect.Effect<Layout, InvalidInput | DatabaseError> =>
        Cache.get(cache, { schema, table, column, tieBreaker }),
      /** Forgets a kept layout (its table changed under it): the next page looks it up again. */
      forget: ({ column, schema, table, tieBreaker }: Target): Effect.Effect<void> =>
        Cache.invalidate(cache, { schema, table, column, tieBreaker })
    })
  )
