/**
 * The stored inbox claim of a consumer with a rate: it locks the consumer's limits row (one claim
 * of it at a time, so no two spend a token) and every capacity slot, counts what is in flight and
 * takes at most what the limit and the bucket leave.
 */
import { entriesHeld, slotLock } from "../flow/capacity.js"
import { CONSUMER_LIMITS, type Tables } from "../flow/limits.js"
import { bucket, ownRate } from "../flow/rates.js"

export const inboxClaimLimited = (t: Tables) =>
  `CREATE FUNCTION ${t("inbox_claim_limited")}(text, integer, double precision, text, integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    consumer text, message_id text, payload jsonb, headers jsonb, received_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
-- The claim's arguments ($1-$5, as inbox_claim's). It counts in statements of their own after the
-- locks: snapshots that see every claim committed before them. A consumer with a rate and no
-- in-flight limit records nothing.
DECLARE
  cap integer;
  slot_no integer;
  clk timestamptz;
  taken_now bigint;
  claim_rows bigint;
  claim_row record;
  still integer;
  free integer;
BEGIN
-- The consumer's limits, locked (one claim of it at a time, so no two spend a token), and every slot.
SELECT l.max_in_flight INTO cap FROM ${t("inbox_limits")} l WHERE l.consumer = $4 FOR UPDATE;
IF cap IS NOT NULL THEN
  FOR slot_no IN 0 .. ${t("flow_slots")}(cap) - 1 LOOP
    PERFORM pg_advisory_xact_lock(${slotLock(t, CONSUMER_LIMITS, "$4", "slot_no")});
  END LOOP;
END IF;
-- The bucket's clock: after the locks, so a claim that waited for them does not spend at the time it began.
clk := clock_timestamp();
IF cap IS NOT NULL THEN
  -- A new snapshot from here on: every claim committed before the locks is seen. What the claims
  -- took, at most (\`taken\` only ever overstates: an entry leaves the held state on its own).
  SELECT coalesce(sum(c.taken), 0), count(*) INTO taken_now, claim_rows
    FROM ${t("inbox_flow_claims")} c WHERE c.consumer = $4;
  -- Counted exactly (each entry probed by id, a claim with nothing held left dropped) only when
  -- that leaves less room than this claim asks for, or the rows piled up: oldest claims first
  -- (the likeliest settled), until the room is found.
  IF taken_now + $2 > cap OR claim_rows > 32 THEN
    FOR claim_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${t("inbox_flow_claims")} c
       WHERE c.consumer = $4 ORDER BY c.id LOOP
      EXIT WHEN taken_now + $2 <= cap AND claim_rows <= 32;
      still := ${entriesHeld(t, CONSUMER_LIMITS, "claim_row")};
      IF still = 0 THEN
        DELETE FROM ${t("inbox_flow_claims")} c WHERE c.id = claim_row.id;
        claim_rows := claim_rows - 1;
      ELSIF still < claim_row.taken THEN
        UPDATE ${t("inbox_flow_claims")} c SET taken = still WHERE c.id = claim_row.id;
      END IF;
      taken_now := taken_now - claim_row.taken + still;
    END LOOP;
  END IF;
END IF;
SELECT least($2,
         CASE WHEN cap IS NULL THEN $2 ELSE greatest(cap - taken_now, 0)::integer END,
         CASE WHEN l.rate_limit IS NULL THEN $2
              ELSE floor(${bucket(t, "l", ownRate, "clk")})
                     ::integer END)
  INTO free FROM ${t("inbox_limits")} l WHERE l.consumer = $4;
IF free < 1 THEN
  RETURN;
END IF;
RETURN QUERY
WITH claimed AS (
  SELECT * FROM ${t("inbox_claim_open")}($1, free, $3, $4, $5)),
recorded AS (
  -- What this claim took, one row (a consumer with an in-flight limit only).
  INSERT INTO ${t("inbox_flow_claims")} (consumer, entries, generations, taken)
  SELECT $4, array_agg(c.id::bigint), array_agg(c.generation::bigint), count(*) FROM claimed c
   WHERE NOT c.exhausted AND cap IS NOT NULL
  HAVING count(*) > 0),
spent AS (
  -- A consumer with a rate spends a token per entry taken.
  UPDATE ${t("inbox_limits")} l
     SET tokens = ${bucket(t, "l", ownRate, "clk")}
                  - (SELECT count(*) FROM claimed c WHERE NOT c.exhausted),
         tokens_at = clk
   WHERE l.consumer = $4 AND l.rate_limit IS NOT NULL)
SELECT * FROM claimed;
END
$claim$`
