/**
 * Every timestamp the substrate returns has one form: ISO-8601 in UTC with PostgreSQL's
 * microseconds kept (`2026-11-29T18:00:00.123456Z`), whatever the session's time zone or
 * date style. A JavaScript `Date` would drop the microseconds, which keyset positions need.
 */

/** SQL that renders a `timestamptz` expression (our own column names only) as ISO-8601 UTC text. */
export const isoUtc = (expression: string): string =>
  `to_char(${expression} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`

const PG_TEXT = /^(\d{4,})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?([+-]\d\d)(?::?(\d\d))?(?::?(\d\d))?$/

/**
 * A `timestamptz` as PostgreSQL prints it in the ISO date style (`2026-11-29 19:00:00.12+01`),
 * as ISO-8601 UTC with microseconds. Text in another form is returned as it is.
 */
export const isoFromPgText = (text: string): string => {
  const m = PG_TEXT.exec(text)
  if (m === null) return text
  const sign = m[8]!.startsWith("-") ? -1 : 1
  const offsetSeconds = sign * (Math.abs(Number(m[8])) * 3600 + Number(m[9] ?? 0) * 60 + Number(m[10] ?? 0))
  const utc = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6])) -
    offsetSeconds * 1000
  return `${new Date(utc).toISOString().slice(0, 19)}.${(m[7] ?? "").padEnd(6, "0")}Z`
}

/** Epoch milliseconds of an ISO-8601 UTC text from `isoUtc` or `isoFromPgText`. */
export const epochMillis = (iso: string): number => Date.parse(iso)
