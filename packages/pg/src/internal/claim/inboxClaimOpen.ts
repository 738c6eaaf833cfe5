/**
 * The stored inbox's open claim: a consumer's ready entries in id order, a lease run out too often
 * sent to the dead letters. The consumer's other claim paths call it for what they take;
 * `explainClaim` explains its query.
 */
import type { Tables } from "../flow/limits.js"

export const inboxClaimOpen = (t: Tables) =>
  `CREATE FUNCTION ${t("inbox_claim_open")}(text, integer, double precision, text, integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    consumer text, message_id text, payload jsonb, headers jsonb, received_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
-- $1 worker, $2 the most entries to take, $3 lease in seconds, $4 the consumer, $5 the most leases
-- an entry may lose.
BEGIN
RETURN QUERY
WITH ready AS (
  SELECT c.id FROM ${t("inbox")} c
   WHERE c.processed_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now()
     AND (c.claimed_until IS NULL OR c.claimed_until <= now())
     AND c.consumer = $4
   ORDER BY c.id
   LIMIT $2
   FOR UPDATE SKIP LOCKED)
-- Each entry decided once: one whose lease ran out unsettled (\`lapsed\`: its worker died or
-- stalled) counts one more lost lease, and one that has now lost $5 (\`dead\`) goes to the dead
-- letters, reported exhausted, instead of to a worker.
UPDATE ${t("inbox")} q
   SET (claimed_by, claimed_until, claim_generation, attempt_count, lease_expiries, dead_at, last_error) = (
     SELECT CASE WHEN d.dead THEN q.claimed_by ELSE $1 END,
            CASE WHEN d.dead THEN NULL ELSE now() + make_interval(secs => $3) END,
            CASE WHEN d.dead THEN q.claim_generation ELSE q.claim_generation + 1 END,
            CASE WHEN d.dead THEN q.attempt_count ELSE q.attempt_count + 1 END,
            q.lease_expiries + CASE WHEN d.lapsed THEN 1 ELSE 0 END,
            CASE WHEN d.dead THEN now() END,
            CASE WHEN d.dead
              THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
              ELSE q.last_error END
       FROM (SELECT q.claimed_until IS NOT NULL AS lapsed,
                    q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 AS dead) d)
 WHERE q.id = ANY(ARRAY(SELECT r.id FROM ready r))
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL,
  q.consumer, q.message_id, q.payload, q.headers, to_char(q.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
END
$claim$`
