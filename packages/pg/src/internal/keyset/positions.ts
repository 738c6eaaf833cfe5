/**
 * How a column's value becomes a cursor position and back: text that casts back to exactly the
 * value it was read from, whatever the session's `TimeZone` and `DateStyle`; and the most a
 * position of each type takes in a cursor. Only the types listed here, with a bounded text,
 * order a traversal: a traversal whose every cursor fits is served to its end, any other is
 * refused before its first page.
 */
import * as Cursor from "@effect-durable/core/Cursor"
import { InvalidInput } from "@effect-durable/core/Errors"
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"

/**
 * The types (`pg_type.typname` of the column's type, or of the base type of its domain) a
 * position carries exactly. The text types (`text`, `varchar`, `bpchar` — `char(n)` — and the
 * extension's `citext`) need a bound on their values' length: their type's, a validated CHECK
 * constraint's, or one the caller declares.
 */
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
  "bpchar",
  "citext",
  "uuid"
] as const
export type PositionType = typeof POSITION_TYPES[number]

/** The text types: bounded by a length, theirs or one a constraint or the caller gives. */
export const TEXT_TYPES: ReadonlyArray<PositionType> = ["text", "varchar", "bpchar", "citext"]

/** The same list as the documentation and errors name it. */
export const POSITION_TYPES_SHOWN =
  "timestamp with time zone, timestamp without time zone, date, smallint, integer, bigint, numeric(p, s), uuid, or text, varchar, char(n) and citext with a known length bound (and domains over these)"

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

/**
 * A position text bound as a parameter and cast back to the column's (base) type: `cast` is its
 * name as SQL writes it (`varchar`, or `"public"."citext"` for an extension's type).
 */
export const positionValue = (sql: SqlClient.SqlClient, cast: string, text: string): Statement.Fragment =>
  sql`${text}::${sql.literal(cast)}`

// The longest text of each fixed-size type, in ASCII (one byte each in a cursor): the to_char
// forms above at their extremes ("294276-12-31T23:59:59.999999Z", "4714-11-24T00:00:00.000000Z BC",
// "5874897-12-31", "-9223372036854775808") and a uuid's 36 characters.
const FIXED_BYTES: Partial<Record<PositionType, number>> = {
  timestamptz: 30,
  timestamp: 30,
  date: 13,
  int2: 6,
  int4: 11,
  int8: 20,
  uuid: 36
}

// The header PostgreSQL adds to a varchar's and a numeric's type modifier (VARHDRSZ).
const TYPMOD_HEADER = 4

/**
 * The most bytes a position of this column takes in a cursor, from its type and type modifier
 * (`pg_attribute.atttypmod`, -1 when none), or `undefined` when the column holds values of any
 * length: `text`, `citext`, `varchar` and `char` without a length, `numeric` without a precision.
 */
export const positionBytes = (type: PositionType, typmod: number): number | undefined => {
  const fixed = FIXED_BYTES[type]
  if (fixed !== undefined) return fixed
  if (typmod < TYPMOD_HEADER) return undefined
  const modifier = typmod - TYPMOD_HEADER
  // char(n) reads back without its trailing spaces: at most n characters too.
  if (type === "varchar" || type === "bpchar") return modifier * Cursor.MAX_BYTES_PER_CHARACTER
  if (type !== "numeric") return undefined
  // numeric(p, s): a sign, the integer digits (at least "0"), then a point and s digits;
  // s may be negative or above p (PostgreSQL 15). "-Infinity" bounds the special values.
  const precision = (modifier >> 16) & 0xffff
  const scale = ((modifier & 0x7ff) ^ 1024) - 1024
  return Math.max(1 + Math.max(precision - scale, 1) + (scale > 0 ? 1 + scale : 0), "-Infinity".length)
}

/** What `checkCapacity` needs of a column. */
export interface Bounded {
  readonly name: string
  readonly shown: string
  readonly bytes: number
}

/**
 * Refuses, before any page is read, a traversal some cursor of which would not fit in a token:
 * its two columns' positions may take more than a cursor for this subject carries. Checked on
 * every page (the subject is part of the request), so no page is ever served whose successor
 * cannot be. The column to change is named; the subject when a shorter one would do.
 */
export const checkCapacity = (
  subject: string,
  column: Bounded,
  tieBreaker: Bounded
): Effect.Effect<void, InvalidInput> => {
  const capacity = Cursor.positionCapacity(subject)
  const needed = column.bytes + tieBreaker.bytes
  if (needed <= capacity) return Effect.void
  if (needed <= Cursor.positionCapacity("s")) {
    return Effect.fail(
      new InvalidInput({
        argument: "subject",
        rule:
          `a subject short enough for this traversal's cursors: a position of (${column.name}, ${tieBreaker.name}) takes up to ${needed} bytes in a cursor, and a cursor for this subject carries ${capacity}`
      })
    )
  }
  const [argument, wide, other] = tieBreaker.bytes >= column.bytes
    ? ["order.tieBreaker", tieBreaker, column] as const
    : ["order.column", column, tieBreaker] as const
  const room = Math.max(0, capacity - other.bytes)
  return Effect.fail(
    new InvalidInput({
      argument,
      rule:
        `a column whose values a cursor carries whole: ${wide.name} is ${wide.shown}, up to ${wide.bytes} bytes in a cursor, and beside ${other.name} a cursor for this subject carries ${room} (varchar(n) with n at most ${
          Math.floor(room / Cursor.MAX_BYTES_PER_CHARACTER)
        }, or a narrower type)`
    })
  )
}
