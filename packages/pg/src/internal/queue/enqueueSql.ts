/**
 * The statements that write checked messages into the outbox — one (`Outbox.enqueue`) or many
 * (`Outbox.enqueueMany`), each also in a form after a write of the caller's
 * (`OutboxStatements.enqueueAfter`, `enqueueEachAfter`): one statement, no transaction of its
 * own, so it joins the caller's, and pg_notify's wake-up is delivered only if that transaction
 * commits.
 */
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import { arrayLiteral } from "../sqlText.js"

/** A message as `prepare` checked it: canonical JSON text, seconds, the group ("" for none). */
export interface CheckedMessage {
  readonly topic: string
  readonly orderingKey: string | null
  readonly payload: string
  readonly headers: string
  readonly delaySeconds: number
  readonly dueSeconds: number
  readonly maxAttempts: number
  readonly dedupKey: string | null
  readonly group: string
}

/**
 * The due time of key `k`'s last open message (one probe of the key index): a keyed message
 * is never due before the messages ahead of it in its key, so due order never puts a key's
 * later message before its head (which only the head's claim may take; a thousand such in
 * front would fill the claim's window for keyed heads).
 */
export const dueOfKeyTail = (sql: SqlClient.SqlClient, table: Statement.Fragment, k: Statement.Fragment) =>
  sql`(SELECT e.due_at FROM ${table} e
        WHERE e.ordering_key = ${k} AND e.projected_at IS NULL AND e.dead_at IS NULL ORDER BY e.id DESC LIMIT 1)`

/**
 * Inserts `row` into `table` and wakes `channel`'s listeners at commit; its id. With a dedup
 * key, nothing when an open message holds the key (the unique index answers, without waiting
 * for a lock). After `write`: the message only if `write` returned a row, in the same statement.
 */
export const insert = (
  sql: SqlClient.SqlClient,
  table: Statement.Fragment,
  channel: string,
  row: CheckedMessage,
  write?: Statement.Fragment
) => {
  const values = sql`${row.topic}, ${row.orderingKey}, ${row.payload}::jsonb, ${row.headers}::jsonb,
              now() + make_interval(secs => ${row.delaySeconds}), ${row.maxAttempts}::int, ${row.dedupKey}, ${row.group},
              ${
    row.orderingKey === null
      ? sql`now() + make_interval(secs => ${row.dueSeconds})`
      : sql`greatest(now() + make_interval(secs => ${row.dueSeconds}), ${
        dueOfKeyTail(sql, table, sql`${row.orderingKey}`)
      })`
  }`
  return sql<{ id: string }>`
    WITH ${write === undefined ? sql`` : sql`w AS (${write}),`} m AS (
      INSERT INTO ${table} (topic, ordering_key, payload, headers, available_at, max_attempts, dedup_key, group_key,
                            due_at)
      ${write === undefined ? sql`VALUES (${values})` : sql`SELECT ${values} WHERE EXISTS (SELECT 1 FROM w)`}
      ${
    row.dedupKey === null
      ? sql``
      : sql`ON CONFLICT (topic, dedup_key) WHERE dedup_key IS NOT NULL AND projected_at IS NULL AND dead_at IS NULL
            DO NOTHING`
  }
      RETURNING id, topic)
    SELECT m.id::text AS id, pg_notify(${channel}, m.topic) IS NULL AS notified FROM m`
}

/**
 * Inserts `rows` (no dedup keys) into `table` in their order, one wake-up per topic at commit;
 * the rows' ids. After `write` (a statement returning a text column `key`): only the rows whose
 * `keys` entry `write` returned, in the same statement; then what is returned is those keys.
 */
export const insertMany = (
  sql: SqlClient.SqlClient,
  table: Statement.Fragment,
  channel: string,
  rows: ReadonlyArray<CheckedMessage>,
  after?: { readonly write: Statement.Fragment; readonly keys: ReadonlyArray<string> }
) =>
  sql<{ id: string }>`
    WITH ${after === undefined ? sql`` : sql`w AS (${after.write}),`} m AS (
      INSERT INTO ${table} (topic, ordering_key, payload, headers, available_at, max_attempts, group_key, due_at)
      SELECT t, k, p::jsonb, h::jsonb, now() + make_interval(secs => d), a, g,
             -- A keyed message: no earlier than its key's messages before it, here or stored.
             CASE WHEN k IS NULL THEN now() + make_interval(secs => due)
                  ELSE greatest(max(now() + make_interval(secs => due)) OVER (PARTITION BY k ORDER BY n),
                                ${dueOfKeyTail(sql, table, sql`k`)}) END
        FROM unnest(${rows.map((r) => r.topic)}::text[], ${arrayLiteral(rows.map((r) => r.orderingKey))}::text[],
                    ${rows.map((r) => r.payload)}::text[], ${rows.map((r) => r.headers)}::text[],
                    ${arrayLiteral(rows.map((r) => r.delaySeconds))}::float8[], ${
    arrayLiteral(rows.map((r) => r.maxAttempts))
  }::int[], ${rows.map((r) => r.group)}::text[], ${arrayLiteral(rows.map((r) => r.dueSeconds))}::float8[], ${
    after === undefined ? rows.map(() => "") : after.keys
  }::text[])
             WITH ORDINALITY AS u(t, k, p, h, d, a, g, due, key, n)
       ${after === undefined ? sql`` : sql`WHERE u.key IN (SELECT w.key FROM w)`}
       ORDER BY n
      RETURNING id, topic),
    -- One wake-up per topic, not per row (each pg_notify call is checked for duplicates).
    notified AS (SELECT count(pg_notify(${channel}, t.topic)) AS n FROM (SELECT DISTINCT topic FROM m) t)
    ${
    after === undefined
      ? sql`SELECT m.id::text AS id FROM m CROSS JOIN notified`
      : sql`SELECT w.key AS id FROM w CROSS JOIN notified`
  }`
