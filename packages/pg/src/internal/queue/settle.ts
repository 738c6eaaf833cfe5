/**
 * How a claimed row ends a failed delivery (`release`): given back for a retry after its delay,
 * or dead when the failure is permanent or its last allowed one. The failure joins the row's
 * history of failures either way. In the outbox a dead message leaves the open table for the
 * dead letters in the same statement; the inbox's entry stays in place, marked.
 */
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import type { Settings } from "../../DurableConfig.js"
import { isoUtc } from "../timestamps.js"
import * as Lifecycle from "./lifecycle.js"
import * as Moves from "./moves.js"
import type { QueueSpec } from "./spec.js"

/** How many failed deliveries a row keeps in its `failures` history (the newest). */
export const FAILURE_HISTORY = 10

export const release = (
  sql: SqlClient.SqlClient,
  settings: Settings,
  spec: QueueSpec,
  fence: Statement.Fragment,
  failure: { readonly error: string; readonly retrySeconds: number; readonly permanent: boolean }
): Statement.Statement<{ dead: boolean }> => {
  const { error, permanent, retrySeconds } = failure
  const table = sql.literal(spec.table)
  // The row as it ends this delivery (`r`, over the queue's table as `q`).
  const released = sql`SELECT q.id, (${permanent} OR q.failure_count + 1 >= q.max_attempts) AS dies,
           CASE
             WHEN ${permanent} THEN ${error} || ${` ${Lifecycle.PERMANENT_FAILURE}`}::text
             WHEN q.failure_count + 1 >= q.max_attempts
               THEN ${error} || format(' (dead: %s failed deliveries)', q.failure_count + 1)
             ELSE ${error} END AS last_error,
           CASE WHEN jsonb_array_length(coalesce(q.failures, '[]')) >= ${sql.literal(String(FAILURE_HISTORY))}
                THEN q.failures - 0 ELSE coalesce(q.failures, '[]') END
             || jsonb_build_array(jsonb_build_object(
                  'attempt', q.attempt_count, 'worker', q.claimed_by,
                  'at', ${sql.literal(isoUtc("now()"))}, 'error', left(${error}, 500))) AS failures
      FROM ${table} q WHERE ${fence}`
  const dead = Moves.selectList({
    claimed_until: "NULL",
    failure_count: "m.failure_count + 1",
    last_error: "r.last_error",
    failures: "r.failures",
    dead_at: "now()"
  })
  return spec.moves
    ? sql<{ dead: boolean }>`
        WITH r AS MATERIALIZED (${released} FOR UPDATE),
        kept AS (
          UPDATE ${table} q SET claimed_until = NULL, failure_count = q.failure_count + 1,
                 available_at = now() + make_interval(secs => ${retrySeconds}),
                 last_error = r.last_error, failures = r.failures
            FROM r WHERE q.id = r.id AND NOT r.dies
          RETURNING false AS dead),
        gone AS (DELETE FROM ${table} q USING r WHERE q.id = r.id AND r.dies RETURNING q.*),
        buried AS (
          INSERT INTO ${sql.literal(settings.table("outbox_dead"))} (${sql.literal(Moves.COLUMN_LIST)})
          SELECT ${sql.literal(dead)} FROM gone m JOIN r ON r.id = m.id
          RETURNING true AS dead)
        SELECT dead FROM kept UNION ALL SELECT dead FROM buried`
    : sql<{ dead: boolean }>`
        WITH r AS (${released})
        UPDATE ${table} q SET claimed_until = NULL, failure_count = q.failure_count + 1,
               available_at = now() + make_interval(secs => ${retrySeconds}),
               dead_at = CASE WHEN r.dies THEN now() END, last_error = r.last_error, failures = r.failures
          FROM r WHERE q.id = r.id
        RETURNING q.dead_at IS NOT NULL AS dead`
}
