/**
 * How every outbox claim ends, over the rows it locked: a head whose lease ran out unsettled
 * (its worker died or stalled) counts one more lost lease, and one that has now lost `$5` leaves
 * the open table for the dead letters in this statement (`dying`, reported exhausted) instead of
 * going to a worker; the others are taken — leased to `$1` for `$3` seconds, their claim
 * generation and attempt counted. The claim's rows come back in one shape, dead or taken.
 */
import type { Tables } from "../flow/limits.js"
import { COLUMN_LIST, LEASE_EXHAUSTED, selectList } from "../queue/moves.js"

export const takeOrBury = (t: Tables, ids: {
  /** The heads locked (an array expression): only a head's lapsed lease counts. */
  readonly heads: string
  /** Every row locked (an array expression), heads included. */
  readonly all: string
}) => {
  const lapsedHead = ids.heads === ids.all
    ? "q.claimed_until IS NOT NULL"
    : `q.claimed_until IS NOT NULL AND q.id = ANY(${ids.heads})`
  return `dying AS MATERIALIZED (
  SELECT q.id FROM ${t("outbox")} q
   WHERE q.id = ANY(${ids.heads}) AND q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5),
gone AS (
  DELETE FROM ${t("outbox")} q WHERE q.id = ANY(ARRAY(SELECT d.id FROM dying d)) RETURNING q.*),
buried AS (
  INSERT INTO ${t("outbox_dead")} (${COLUMN_LIST})
  SELECT ${selectList(LEASE_EXHAUSTED)} FROM gone m
  RETURNING *),
-- The rows taken, named by an array of ids (a probe of the primary key each): a join with the
-- claim's rows could be planned from the wrong side, reading every open message (2.4 s for a
-- claim of 500 from a keyed backlog of 10,000).
taken AS (
  UPDATE ${t("outbox")} q
     SET claimed_by = $1, claimed_until = now() + make_interval(secs => $3),
         claim_generation = q.claim_generation + 1, attempt_count = q.attempt_count + 1,
         lease_expiries = q.lease_expiries + CASE WHEN ${lapsedHead} THEN 1 ELSE 0 END
   WHERE q.id = ANY(${ids.all}) AND q.id <> ALL(ARRAY(SELECT d.id FROM dying d))
     AND q.projected_at IS NULL AND q.dead_at IS NULL
  RETURNING *)
SELECT r.id::text, r.claim_generation::text, r.attempt_count, r.dead, r.topic, r.ordering_key, r.payload, r.headers,
       to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), r.group_key
  FROM (SELECT k.*, false AS dead FROM taken k UNION ALL SELECT b.*, true AS dead FROM buried b) r;`
}
