/**
 * The statement that writes one checked message into the outbox (`Outbox.enqueue`), and its
 * form after a write of the caller's (`OutboxStatements.enqueueAfter`): one statement, no
 * transaction of its own, so it joins the caller's, and pg_notify's wake-up is delivered only
 * if that transaction commits.
 */
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"

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
