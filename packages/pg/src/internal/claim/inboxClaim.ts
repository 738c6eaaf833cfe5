/**
 * The stored inbox's claim every worker calls, with the signature and result of every release
 * since version 8: it takes the inbox limits lock shared, chooses the consumer's path and returns
 * what that path claimed.
 */
import { CONSUMER_LIMITS, limitsLock, type Tables } from "../flow/limits.js"

export const inboxClaim = (t: Tables) =>
  `CREATE OR REPLACE FUNCTION ${t("inbox_claim")}(text, integer, double precision, text, integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    consumer text, message_id text, payload jsonb, headers jsonb, received_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
-- $1 worker, $2 the most entries to take, $3 lease in seconds, $4 the consumer, $5 the most leases
-- an entry may lose.
DECLARE
  cap integer;
  rated boolean;
BEGIN
-- Every claim holds the inbox limits lock shared and a change of limits takes it exclusive: once a
-- claim holds it, the consumer's limits are what its next statements see.
PERFORM pg_advisory_xact_lock_shared(${limitsLock(t, CONSUMER_LIMITS)});
SELECT l.max_in_flight, l.rate_limit IS NOT NULL INTO cap, rated FROM ${t("inbox_limits")} l WHERE l.consumer = $4;
IF NOT FOUND THEN
  RETURN QUERY SELECT * FROM ${t("inbox_claim_open")}($1, $2, $3, $4, $5);
  RETURN;
END IF;
IF cap IS NOT NULL AND NOT rated THEN
  -- Only an in-flight limit: the claim takes capacity slots, not the limits row.
  RETURN QUERY SELECT * FROM ${t("inbox_claim_slots")}($1, $2, $3, $4, $5, cap);
ELSE
  RETURN QUERY SELECT * FROM ${t("inbox_claim_limited")}($1, $2, $3, $4, $5);
END IF;
END
$claim$`
