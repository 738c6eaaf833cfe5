/**
 * The one statement that reads a page: the rows after the cursor's last position and within
 * its high-water mark, in the traversal's order, one more than the page holds (so the page
 * knows whether another follows), each with its position as text. An ascending first page
 * also reads the current last position in the same statement: its high-water mark.
 */
import type * as Cursor from "@effect-durable/core/Cursor"
import type { DatabaseError } from "@effect-durable/core/Errors"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import { classifySqlErrors } from "../../ErrorClassification.js"
import type { Layout } from "./catalog.js"
import { positionText, positionValue } from "./positions.js"
import type { Query } from "./request.js"

// The position columns added to each row. Single lowercase words: a client's result-name
// transform (snake_case to camelCase) leaves them as they are.
const VALUE = "effectdurablepositionvalue"
const TIE_BREAKER = "effectdurablepositiontiebreaker"
const HIGH_WATER = "effectdurablehighwater"
const OVERLONG = "effectdurableoverlong"

const PositionColumns = Schema.Struct({
  [VALUE]: Schema.String,
  [TIE_BREAKER]: Schema.String,
  [HIGH_WATER]: Schema.optional(Schema.NullOr(Schema.Tuple([Schema.String, Schema.String]))),
  [OVERLONG]: Schema.optional(Schema.NullOr(Schema.Tuple([Schema.Number, Schema.Number])))
})
const decodePositions = Schema.decodeUnknownSync(PositionColumns)

/** A row as the caller's table has it, and where it stands in the traversal. */
export interface PageRow {
  readonly item: Record<string, unknown>
  readonly position: Cursor.Position
  /** On an ascending first page: the last position the traversal will serve. */
  readonly highWater: Cursor.Position | undefined
  /**
   * On a first page with declared bounds: the lengths (column, tie-breaker) of a row the
   * traversal would serve that is past one of them.
   */
  readonly overlong: readonly [number, number] | undefined
}

/** The bounds the caller declared, in characters, for the columns that page by them. */
export interface Declared {
  readonly column: number | undefined
  readonly tieBreaker: number | undefined
}

const toPageRow = (row: Record<string, unknown>): PageRow => {
  const { [HIGH_WATER]: _high, [OVERLONG]: _overlong, [TIE_BREAKER]: _tie, [VALUE]: _value, ...item } = row
  const positions = decodePositions(row)
  const high = positions[HIGH_WATER]
  const overlong = positions[OVERLONG]
  return {
    item,
    position: { value: positions[VALUE], tieBreaker: positions[TIE_BREAKER] },
    highWater: high === undefined || high === null ? undefined : { value: high[0], tieBreaker: high[1] },
    overlong: overlong === undefined || overlong === null ? undefined : overlong
  }
}

/** Reads up to `query.limit + 1` rows of the traversal from where `cursor` stands. */
export const readPage = (
  sql: SqlClient.SqlClient,
  query: Query,
  layout: Layout,
  cursor: Cursor.Cursor | undefined,
  declared: Declared
): Effect.Effect<ReadonlyArray<PageRow>, DatabaseError> => {
  const relation = sql.literal(layout.relation)
  const column = sql`t.${sql(layout.column.name)}`
  const tieBreaker = sql`t.${sql(layout.tieBreaker.name)}`
  const key = sql`(${column}, ${tieBreaker})`
  const keyText = [positionText(sql, layout.column.type, column), positionText(sql, layout.tieBreaker.type, tieBreaker)]
  const at = (position: Cursor.Position) =>
    sql`(${positionValue(sql, layout.column.cast, position.value)}, ${
      positionValue(sql, layout.tieBreaker.cast, position.tieBreaker)
    })`

  const selection: Array<Statement.Fragment> = [
    ...query.where.map(([name, value]) =>
      value === null ? sql`t.${sql(name)} IS NULL` : sql`t.${sql(name)} = ${value}`
    ),
    // Parenthesised: an OR of the caller's must not reach past its own condition.
    ...(query.filter === undefined ? [] : [sql`(${query.filter})`])
  ]
  const ascending = query.direction === "asc"
  const direction = sql.literal(ascending ? "ASC" : "DESC")
  // Past the last row served, and never past the high-water mark the first page recorded.
  const window = cursor === undefined ? [] : [
    ...(cursor.after === undefined
      ? []
      : [ascending ? sql`${key} > ${at(cursor.after)}` : sql`${key} < ${at(cursor.after)}`]),
    sql`${key} <= ${at(cursor.highWater)}`
  ]
  // A descending traversal starts at its high-water mark: the first row served is it. An
  // ascending one ends there, so its first page reads it (same statement, same snapshot).
  const highWater = ascending && cursor === undefined
    ? sql`, (SELECT ARRAY[${keyText[0]}, ${keyText[1]}] FROM ${relation} t
              WHERE ${sql.and(selection)}
              ORDER BY ${column} DESC, ${tieBreaker} DESC LIMIT 1) AS ${sql.literal(HIGH_WATER)}`
    : sql.literal("")
  // A first page with a declared bound looks for a row past it among every row the traversal
  // would serve (same statement, same snapshot): found, the traversal is refused before its
  // first page. A scan of the traversal's rows, once per traversal, as the price of a bound the
  // schema does not keep.
  const past = [
    ...(declared.column === undefined ? [] : [sql`char_length(${keyText[0]}) > ${declared.column}`]),
    ...(declared.tieBreaker === undefined ? [] : [sql`char_length(${keyText[1]}) > ${declared.tieBreaker}`])
  ]
  const overlong = cursor === undefined && past.length > 0
    ? sql`, (SELECT ARRAY[char_length(${keyText[0]}), char_length(${keyText[1]})] FROM ${relation} t
              WHERE ${sql.and([...selection, sql.or(past)])} LIMIT 1) AS ${sql.literal(OVERLONG)}`
    : sql.literal("")

  return sql<Record<string, unknown>>`
    SELECT t.*, ${keyText[0]} AS ${sql.literal(VALUE)}, ${keyText[1]} AS ${
    sql.literal(TIE_BREAKER)
  } ${highWater} ${overlong}
      FROM ${relation} t
     WHERE ${sql.and([...selection, ...window])}
     ORDER BY ${column} ${direction}, ${tieBreaker} ${direction}
     LIMIT ${query.limit + 1}`.pipe(
    classifySqlErrors("Keyset.page"),
    // A row without its positions is a defect: this statement wrote them.
    Effect.map((rows) => rows.map(toPageRow))
  )
}
