/**
 * Where an outbox message goes when it settles, and where it comes back from: the open table
 * (`outbox`, what every claim scans) holds open messages only; a delivered one moves into the
 * history (`outbox_history`, partitioned by day), a dead or cancelled one into the dead letters
 * (`outbox_dead`), each in the statement that settles it; a redrive, replay or restore moves it
 * back with its id. One row shape for the three tables, so a move is a DELETE and an INSERT of
 * the same columns, some of them changed on the way.
 */
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"

/** The columns of a message, in the tables' order. */
export const MESSAGE_COLUMNS = [
  "id",
  "topic",
  "ordering_key",
  "payload",
  "headers",
  "created_at",
  "available_at",
  "claimed_by",
  "claimed_until",
  "claim_generation",
  "attempt_count",
  "max_attempts",
  "projected_at",
  "dead_at",
  "last_error",
  "failure_count",
  "lease_expiries",
  "failures",
  "dedup_key",
  "cancelled_at",
  "cancelled_by",
  "group_key",
  "due_at",
  "feed_position"
] as const
export type Column = typeof MESSAGE_COLUMNS[number]

export type Place = "outbox" | "outbox_dead" | "outbox_history"

/** The columns, as an INSERT lists them. */
export const COLUMN_LIST = MESSAGE_COLUMNS.join(", ")

/** The SELECT list over the moved rows (`m`), a column taken from `changes` where it has one. */
export const selectList = (changes: Partial<Record<Column, string>>) =>
  MESSAGE_COLUMNS.map((column) => changes[column] ?? `m.${column}`).join(", ")

/** A dead message, settled by its lease running out once too often (`m`: the row before). */
export const LEASE_EXHAUSTED: Partial<Record<Column, string>> = {
  claimed_until: "NULL",
  lease_expiries: "m.lease_expiries + 1",
  dead_at: "now()",
  last_error:
    "concat_ws('; ', m.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', m.lease_expiries + 1))"
}

/**
 * A move as SQL text (for the database functions): the rows of `from` that `where` selects (over
 * `q`) go to `to`, with `changes` (expressions over the moved row `m`); `returning` is over the
 * inserted row. One statement: the rows are in one place at every moment.
 */
export const moveText = (
  t: (table: string) => string,
  move: {
    readonly from: Place
    readonly to: Place
    readonly where: string
    readonly changes: Partial<Record<Column, string>>
    readonly returning: string
  }
) =>
  `WITH m AS (DELETE FROM ${t(move.from)} q WHERE ${move.where} RETURNING q.*)
INSERT INTO ${t(move.to)} (${MESSAGE_COLUMNS.join(", ")})${move.to === "outbox" ? " OVERRIDING SYSTEM VALUE" : ""}
SELECT ${selectList(move.changes)} FROM m
RETURNING ${move.returning}`

/**
 * A move as a statement with parameters: `where` and each change may be fragments (a claim's
 * fence, an error text), the rest as in `moveText`.
 */
/** The SELECT list over the moved rows (`m`) with changes that may be fragments (parameters). */
export const selectFragment = (
  sql: SqlClient.SqlClient,
  changes: Partial<Record<Column, string | Statement.Fragment>>
): Statement.Fragment =>
  sql.join(", ", false)(
    MESSAGE_COLUMNS.map((column) => {
      const change = changes[column]
      return change === undefined
        ? sql.literal(`m.${column}`)
        : typeof change === "string"
        ? sql.literal(change)
        : change
    })
  )

export const move = <A extends object>(
  sql: SqlClient.SqlClient,
  t: (table: string) => string,
  options: {
    readonly from: Place
    readonly to: Place
    readonly where: Statement.Fragment
    readonly changes: Partial<Record<Column, string | Statement.Fragment>>
    readonly returning: string
  }
): Statement.Statement<A> => {
  const list = selectFragment(sql, options.changes)
  return sql<A>`WITH m AS (DELETE FROM ${sql.literal(t(options.from))} q WHERE ${options.where} RETURNING q.*)
    INSERT INTO ${sql.literal(t(options.to))} (${sql.literal(MESSAGE_COLUMNS.join(", "))})${
    sql.literal(options.to === "outbox" ? " OVERRIDING SYSTEM VALUE" : "")
  }
    SELECT ${list} FROM m
    RETURNING ${sql.literal(options.returning)}`
}

/** What a message reopened by an operator starts again with: fresh attempts, deliverable now, no lease. */
export const RESTART: Partial<Record<Column, string>> = {
  projected_at: "NULL",
  dead_at: "NULL",
  cancelled_at: "NULL",
  cancelled_by: "NULL",
  attempt_count: "0",
  failure_count: "0",
  lease_expiries: "0",
  available_at: "now()",
  claimed_until: "NULL"
}
