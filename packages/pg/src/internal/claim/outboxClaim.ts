/**
 * The outbox claim every worker calls, with the signature and result of every release since
 * version 12: it takes the limits lock shared, chooses the claim's path and returns what that
 * path claimed.
 */
import { limitsLock, type Tables, TOPIC_LIMITS } from "../flow/limits.js"

export const outboxClaim = (t: Tables) =>
  `CREATE OR REPLACE FUNCTION ${t("outbox_claim")}(text, integer, double precision, text[], integer, integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    topic text, ordering_key text, payload jsonb, headers jsonb, created_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
  SET enable_sort = off
  SET jit = off
AS $claim$
#variable_conflict use_column
-- $1 worker, $2 the most messages to take, $3 lease in seconds, $4 topics (NULL: all), $5 the most
-- leases a message may lose, $6 the most messages of one key.
DECLARE
  limited text[];
  cap integer;
BEGIN
-- Every claim holds the limits lock shared and a change of limits takes it exclusive: once a claim
-- holds it, the topics with limits are what its next statements see.
PERFORM pg_advisory_xact_lock_shared(${limitsLock(t, TOPIC_LIMITS)});
IF NOT EXISTS (SELECT 1 FROM ${t("flow_limits")} l WHERE $4 IS NULL OR l.topic = ANY($4)) THEN
  RETURN QUERY SELECT c.id, c.generation, c.attempt, c.exhausted, c.topic, c.ordering_key, c.payload, c.headers, c.created_at
                 FROM ${t("outbox_claim_open")}($1, $2, $3, $4, $5, $6, false) c;
  RETURN;
END IF;
-- One topic with nothing but an in-flight limit (no rate, no per-group limit or weight, no open
-- message with a named group): its claims take capacity slots, not the limits row.
limited := ARRAY(
  SELECT l.topic FROM ${t("flow_limits")} l
   WHERE ($4 IS NULL OR l.topic = ANY($4)) AND l.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
   ORDER BY l.topic);
SELECT l.max_in_flight INTO cap FROM ${t("flow_limits")} l WHERE l.topic = limited[1];
IF cap IS NOT NULL AND array_length(limited, 1) = 1
   AND NOT EXISTS (
     SELECT 1 FROM ${t("flow_limits")} l
      WHERE l.topic = limited[1]
        AND (l.rate_limit IS NOT NULL OR l.group_rate_limit IS NOT NULL OR l.group_max_in_flight IS NOT NULL))
   AND NOT EXISTS (SELECT 1 FROM ${t("flow_group_limits")} g WHERE g.topic = limited[1])
   AND NOT EXISTS (
     SELECT 1 FROM ${t("outbox")} o
      WHERE o.topic = limited[1] AND o.group_key > '' AND o.projected_at IS NULL AND o.dead_at IS NULL) THEN
  RETURN QUERY SELECT c.id, c.generation, c.attempt, c.exhausted, c.topic, c.ordering_key, c.payload, c.headers, c.created_at
                 FROM ${t("outbox_claim_slots")}($1, $2, $3, $4, $5, $6, limited[1], cap) c;
ELSE
  RETURN QUERY SELECT c.id, c.generation, c.attempt, c.exhausted, c.topic, c.ordering_key, c.payload, c.headers, c.created_at
                 FROM ${t("outbox_claim_limited")}($1, $2, $3, $4, $5, $6) c;
END IF;
END
$claim$`
