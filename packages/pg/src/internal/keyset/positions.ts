/**
 * How a column's value becomes a cursor position and back: text that casts back to exactly the
 * value it was read from, whatever the session's `TimeZone` and `DateStyle`. Only the types
 * listed here can order a traversal; the catalog refuses the others before any page is served.
 */
import { MAX_POSITION_BYTES } from "@effect-durable/core/Cursor"
import { InvalidInput } from "@effect-durable/core/Errors"
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"

/** The built-in types (`pg_type.typname`) a position carries exactly. */
export const POSITION_TYPES = [
  "timestamptz",
  "timestamp",
  "date",
  "int2",
  "int4",
  "int8",
  "numeric",
  "text",
  "varchar",
  "uuid"
] as const
export type PositionType = typeof POSITION_TYPES[number]

/** The same list as the documentation and errors name it. */
export const POSITION_TYPES_SHOWN =
  "timestamp with time zone, timestamp without time zone, date, smallint, integer, bigint, numeric, text, varchar, uuid"

export const isPositionType = (typname: string): typname is PositionType =>
  (POSITION_TYPES as ReadonlyArray<string>).includes(typname)

// `::text` of a date/time value follows DateStyle (and TimeZone for timestamptz), so these are
// written with `to_char` in ISO 8601 instead: timestamptz in UTC with a `Z`, timestamp without
// a zone (AT TIME ZONE would shift it by the session's offset), microseconds kept. ISO input is
// read the same under every DateStyle. Years before 1 get to_char's ` BC`, which the input
// accepts; ±infinity has no to_char form and keeps its `::text`, which casts back.
const DATE_TIME_FORMATS: Partial<Record<PositionType, { readonly inUtc: boolean; readonly format: string }>> = {
  timestamptz: { inUtc: true, format: `YYYY-MM-DD"T"HH24:MI:SS.US"Z"` },
  timestamp: { inUtc: false, format: `YYYY-MM-DD"T"HH24:MI:SS.US` },
  date: { inUtc: false, format: "YYYY-MM-DD" }
}

/** The position text of `column` (a qualified column reference) of type `type`. */
export const positionText = (
  sql: SqlClient.SqlClient,
  type: PositionType,
  column: Statement.Fragment
): Statement.Fragment => {
  const dateTime = DATE_TIME_FORMATS[type]
  // The other types' text output depends on no setting (floats would: they are not listed).
  if (dateTime === undefined) return sql`${column}::text`
  const value = dateTime.inUtc ? sql`(${column} AT TIME ZONE 'UTC')` : column
  const format = (suffix: string) => sql.literal(`'${dateTime.format}${suffix}'`)
  return sql`CASE WHEN NOT isfinite(${value}) THEN ${value}::text
                  WHEN ${value} < '0001-01-01' THEN to_char(${value}, ${format(" BC")})
                  ELSE to_char(${value}, ${format("")}) END`
}

/** A position text bound as a parameter and cast back to the column's type. */
export const positionValue = (sql: SqlClient.SqlClient, type: PositionType, text: string): Statement.Fragment =>
  sql`${text}::${sql.literal(type)}`

/**
 * A cursor the codec refused to sign, said in the request's terms: a position on this page is
 * longer than a cursor carries, so the column that holds it cannot order a traversal.
 */
export const unencodable = (error: InvalidInput): InvalidInput => {
  const part = /^cursor\.[ha]\[(0|1)\]$/.exec(error.argument)?.[1]
  if (part === undefined) {
    return new InvalidInput({ argument: "order", rule: `positions short enough for a cursor: ${error.rule}` })
  }
  return part === "0"
    ? new InvalidInput({
      argument: "order.column",
      rule:
        `a column whose values are at most ${MAX_POSITION_BYTES.value} bytes as text (a row on this page has a longer one)`
    })
    : new InvalidInput({
      argument: "order.tieBreaker",
      rule:
        `a column whose values are at most ${MAX_POSITION_BYTES.tieBreaker} bytes as text (a row on this page has a longer one)`
    })
}
