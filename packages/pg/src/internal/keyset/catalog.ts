/**
 * What the catalog says about a traversal's columns, read once per (schema, table, order
 * column, tie-breaker) and kept for the life of the layer: their types, that both are NOT NULL,
 * that their types bound their text (so a cursor carries any row's position whole) and that
 * the tie-breaker has a unique index of its own. A traversal the catalog cannot
 * support is refused before its first page; refusals are not kept (a migration may fix them).
 */
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
import { isPositionType, POSITION_TYPES_SHOWN, positionBytes, type PositionType } from "./positions.js"

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
  /** The type as PostgreSQL shows it, `varchar(64)`. */
  readonly shown: string
  /** The most bytes its position takes in a cursor. */
  readonly bytes: number
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
  builtin: Schema.NullOr(Schema.String),
  shown: Schema.NullOr(Schema.String),
  typmod: Schema.NullOr(Schema.Number),
  required: Schema.NullOr(Schema.Boolean),
  uniquealone: Schema.NullOr(Schema.Boolean)
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
  if (row.builtin === null || !isPositionType(row.builtin)) {
    return refuse(
      argument,
      `a column of a type positions can carry exactly (${POSITION_TYPES_SHOWN}); ${name} is ${row.shown}`
    )
  }
  const bytes = positionBytes(row.builtin, row.typmod ?? -1)
  if (bytes === undefined) {
    return refuse(
      argument,
      `a column whose type bounds its values' length, so that a cursor carries any row's position whole (${name} is ${row.shown}, which holds values of any length: make it varchar(n) or numeric(p, s))`
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
  return Effect.succeed({ name, type: row.builtin, shown: row.shown ?? row.builtin, bytes })
}

const lookup = (sql: SqlClient.SqlClient, target: Target): Effect.Effect<Layout, InvalidInput | DatabaseError> => {
  const relation = target.schema === null ? quote(target.table) : `${quote(target.schema)}.${quote(target.table)}`
  return sql`
    SELECT r.relid IS NOT NULL AS found,
           a.attname::text AS name,
           CASE WHEN ty.typnamespace = 'pg_catalog'::regnamespace THEN ty.typname::text END AS builtin,
           format_type(a.atttypid, a.atttypmod) AS shown,
           a.atttypmod AS typmod,
           a.attnotnull AS required,
           EXISTS (SELECT FROM pg_index i
                    WHERE i.indrelid = a.attrelid AND i.indisunique AND i.indisvalid
                      AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum
                      AND i.indpred IS NULL AND i.indexprs IS NULL) AS uniquealone
      FROM (SELECT to_regclass(${relation}) AS relid) r
      LEFT JOIN pg_attribute a
             ON a.attrelid = r.relid AND a.attname IN (${target.column}, ${target.tieBreaker})
            AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_type ty ON ty.oid = a.atttypid`.pipe(
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
