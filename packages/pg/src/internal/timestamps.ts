/**
 * Every timestamp the substrate returns has one form: ISO-8601 in UTC with PostgreSQL's
 * microseconds kept (`2026-11-29T18:00:00.123456Z`), whatever the session's time zone or
 * date style. A JavaScript `Date` would drop the microseconds, which keyset positions need.
 */

/** SQL that renders a `timestamptz` expression (our own column names only) as ISO-8601 UTC text. */
export const isoUtc = (expression: string): string =>
  `to_char(${expression} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
