/**
 * The feed's statements over the outbox's messages (`outbox_messages`: open, delivered and dead
 * alike, each message once at any moment, with its position). Every read computes the horizon
 * in the statement that reads the rows, so both see one snapshot: a row below the horizon that
 * the statement does not see was never committed, and never will be.
 */
import type * as SqlClient from "effect/sql/SqlClient"
import type { Settings } from "../../DurableConfig.js"
import type { MessageRow } from "../rows.js"
import { isoUtc } from "../timestamps.js"

export interface Cursor {
  readonly position: string
  readonly lastId: string
}

export interface EntryRow extends MessageRow {
  readonly position: string
}

export interface ConsumerRow {
  readonly name: string
  readonly topics: ReadonlyArray<string>
  readonly position: string
  readonly last_id: string
  readonly read_count: string
  readonly created_at: string
  readonly read_at: string | null
}

/** The largest id: a cursor at it has read every row of its position. */
export const LAST_ID = "9223372036854775807"

export const statements = (sql: SqlClient.SqlClient, settings: Settings) => {
  const t = settings.table
  const messages = sql.literal(t("outbox_messages"))
  const horizon = sql.literal(`${t("feed_horizon")}()`)

  /**
   * The next rows after `cursor` on `topics`, below the horizon, in (position, id) order: each
   * topic's first `limit` by its index, then the first `limit` of them all.
   */
  const read = (topics: ReadonlyArray<string>, cursor: Cursor, limit: number) =>
    sql<EntryRow>`WITH h AS MATERIALIZED (SELECT ${horizon} AS horizon)
      SELECT e.id::text AS id, e.topic, e.ordering_key, e.payload, e.headers,
             ${sql.literal(isoUtc("e.created_at"))} AS created_at, e.feed_position::text AS position
        FROM unnest(${topics}::text[]) AS t(topic)
        CROSS JOIN LATERAL (
          SELECT m.id, m.topic, m.ordering_key, m.payload, m.headers, m.created_at, m.feed_position
            FROM ${messages} m
           WHERE m.topic = t.topic
             AND (m.feed_position, m.id) > (${cursor.position}::bigint, ${cursor.lastId}::bigint)
             AND m.feed_position < (SELECT horizon FROM h)
           ORDER BY m.feed_position, m.id
           LIMIT ${limit}) e
       ORDER BY e.feed_position, e.id
       LIMIT ${limit}`

  /**
   * Where a consumer registered now starts: after every position already final (and the rows in
   * flight then are read when they commit); at a time, before the first message created then.
   */
  const start = (topics: ReadonlyArray<string>, at: Date | "now") =>
    at === "now"
      ? sql<Cursor>`SELECT (${horizon} - 1)::text AS position, ${LAST_ID} AS "lastId"`
      // Never above the horizon: a message created since then may still be in flight below
      // every committed one (its position is at or above the horizon, which is then the start).
      : sql<Cursor>`SELECT (least(coalesce(min(m.feed_position), ${horizon}), ${horizon}) - 1)::text AS position,
                ${LAST_ID} AS "lastId"
          FROM ${messages} m WHERE m.topic = ANY(${topics}::text[]) AND m.created_at >= ${at.toISOString()}::timestamptz`

  /**
   * A consumer's lag: rows it can read now (below the horizon, after its cursor) and rows
   * committed past the horizon that wait for an older transaction to end, each counted up to `cap`.
   */
  const lag = (name: string | null, cap: number) =>
    sql<
      ConsumerRow & { readonly horizon: string; readonly readable: number; readonly held: number }
    >`WITH h AS MATERIALIZED (SELECT ${horizon} AS horizon)
      SELECT c.name, c.topics, c.position::text AS position, c.last_id::text AS last_id,
             c.read_count::text AS read_count, ${sql.literal(isoUtc("c.created_at"))} AS created_at,
             ${sql.literal(isoUtc("c.read_at"))} AS read_at, h.horizon::text AS horizon,
             (SELECT count(*) FROM unnest(c.topics) AS t(topic) CROSS JOIN LATERAL (
                SELECT 1 FROM ${messages} m
                 WHERE m.topic = t.topic AND (m.feed_position, m.id) > (c.position, c.last_id)
                   AND m.feed_position < h.horizon LIMIT ${cap}) x)::int AS readable,
             (SELECT count(*) FROM unnest(c.topics) AS t(topic) CROSS JOIN LATERAL (
                SELECT 1 FROM ${messages} m
                 WHERE m.topic = t.topic AND m.feed_position >= h.horizon LIMIT ${cap}) x)::int AS held
        FROM ${sql.literal(t("feed_consumers"))} c CROSS JOIN h
       WHERE ${name === null ? sql`true` : sql`c.name = ${name}`}
       ORDER BY c.name`

  /**
   * What holds the horizon back: the oldest transaction of the cluster that has written (its id
   * is the horizon), a session or a prepared transaction. How many transactions it is behind is
   * known to any role; who it is, to a role that may see the session (`pg_read_all_stats`).
   */
  const holder = sql<
    {
      readonly xid: string
      readonly behind: string
      readonly pid: number | null
      readonly database: string | null
      readonly user_name: string | null
      readonly application_name: string | null
      readonly state: string | null
      readonly since: string | null
      readonly seconds: number | null
      readonly query: string | null
      readonly prepared: string | null
    }
  >`WITH s AS MATERIALIZED (SELECT pg_current_snapshot() AS snapshot)
    SELECT pg_snapshot_xmin(s.snapshot)::text AS xid,
           (pg_snapshot_xmax(s.snapshot)::text::bigint - pg_snapshot_xmin(s.snapshot)::text::bigint)::text AS behind,
           a.pid, a.datname AS database, a.usename AS user_name, a.application_name, a.state,
           ${sql.literal(isoUtc("a.xact_start"))} AS since,
           extract(epoch FROM now() - coalesce(a.xact_start, p.prepared))::float8 AS seconds,
           left(a.query, 200) AS query, p.gid AS prepared
      FROM s
      LEFT JOIN pg_stat_activity a ON a.backend_xid = pg_snapshot_xmin(s.snapshot)::xid
      LEFT JOIN pg_prepared_xacts p ON p.transaction = pg_snapshot_xmin(s.snapshot)::xid
     WHERE pg_snapshot_xmin(s.snapshot) <> pg_snapshot_xmax(s.snapshot)`

  return { read, start, lag, holder }
}
