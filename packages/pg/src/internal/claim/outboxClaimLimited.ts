/**
 * The outbox claim of limited topics the long way (rates, per-group limits, fair share, several
 * limited topics in one claim): it locks their limits rows and every capacity slot, so no other
 * claim of them is under way while it counts what is in flight and takes what the limits leave.
 */
import { entriesHeld, slotLock, takenBy } from "../flow/capacity.js"
import { type Tables, TOPIC_LIMITS } from "../flow/limits.js"
import { bucket, groupRateColumns, ownRate } from "../flow/rates.js"

export const outboxClaimLimited = (t: Tables) =>
  `CREATE FUNCTION ${t("outbox_claim_limited")}(text, integer, double precision, text[], integer, integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    topic text, ordering_key text, payload jsonb, headers jsonb, created_at text, group_key text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
  SET enable_sort = off
  SET jit = off
AS $claim$
#variable_conflict use_column
-- The claim's arguments ($1-$6, as outbox_claim's). It counts what is in flight in statements of
-- their own after the locks: snapshots that see every claim committed before them, so two claims
-- never both see the same free capacity (the race of a count read and then acted on). The topics
-- without limits are then claimed the open way, with what is left of the batch.
DECLARE
  limited text[];
  slot_row record;
  clk timestamptz;
  free integer;
  taken integer := 0;
BEGIN
-- The limits of this claim's topics, locked in name order: one claim of a limited topic at a time.
limited := ARRAY(
  SELECT l.topic FROM ${t("flow_limits")} l
   WHERE ($4 IS NULL OR l.topic = ANY($4)) AND l.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
   ORDER BY l.topic FOR UPDATE);
-- And every capacity slot of those topics, in order: no claim that took slots is under way.
FOR slot_row IN SELECT l.topic AS value, s.n FROM ${t("flow_limits")} l
     CROSS JOIN LATERAL generate_series(0, ${t("flow_slots")}(l.max_in_flight) - 1) s(n)
     WHERE l.topic = ANY(limited) AND l.max_in_flight IS NOT NULL ORDER BY l.topic, s.n LOOP
  PERFORM pg_advisory_xact_lock(${slotLock(t, TOPIC_LIMITS, "slot_row.value", "slot_row.n")});
END LOOP;
-- The buckets' clock: after the locks, so a claim that waited for them does not spend at the time it began.
clk := clock_timestamp();
-- A group's bucket that has filled up again (or lost its rate) is no row: dropped. A group's rate
-- is its own where it has one, else the topic's per-group rate (named groups only).
DELETE FROM ${t("flow_group_buckets")} b
 WHERE b.topic = ANY(limited) AND NOT EXISTS (
   SELECT 1 FROM ${t("flow_limits")} l
     LEFT JOIN ${t("flow_group_limits")} o ON o.topic = l.topic AND o.group_key = b.group_key
    CROSS JOIN LATERAL (
      SELECT ${groupRateColumns("o", "l", "b", "             ")}) r
    WHERE l.topic = b.topic
      AND ${bucket(t, "b", (c) => `r.rate_${c}`, "clk")} < r.rate_burst);
-- A new snapshot from here on: every claim committed before the locks is seen.
-- What the claims took, at most: \`taken\` only ever overstates (a message leaves the held state on
-- its own; only a claim, which writes its own row, makes one held again). Counted exactly, message
-- by message (each probed by id: the prune costs what is held, not the backlog), for a topic whose
-- sum leaves less room than this claim asks for, that has per-group limits (a group's count must be
-- exact for fair share to see its room), or whose rows piled up. A row with nothing held is dropped.
WITH need AS (
  SELECT l.topic FROM ${t("flow_limits")} l
   WHERE l.topic = ANY(limited) AND (
     l.max_in_flight < ${takenBy(t, TOPIC_LIMITS, "l.topic")} + $2
     OR l.group_max_in_flight IS NOT NULL
     OR EXISTS (SELECT 1 FROM ${t("flow_group_limits")} g WHERE g.topic = l.topic AND g.max_in_flight IS NOT NULL)
     OR (SELECT count(*) FROM ${t("flow_claims")} c WHERE c.topic = l.topic) > 32)),
counted AS (
  SELECT c.id, ${entriesHeld(t, TOPIC_LIMITS, "c")} AS n
    FROM ${t("flow_claims")} c WHERE c.topic IN (SELECT n.topic FROM need n)),
gone AS (
  DELETE FROM ${t("flow_claims")} c USING counted k WHERE c.id = k.id AND k.n = 0)
UPDATE ${t("flow_claims")} c SET taken = k.n FROM counted k WHERE c.id = k.id AND k.n > 0 AND c.taken <> k.n;
-- A group at or behind the topic's virtual time holds nothing a new one would not: forgotten.
DELETE FROM ${t("flow_group_state")} s USING ${t("flow_limits")} l
 WHERE l.topic = ANY(limited) AND s.topic = l.topic AND s.vtime <= l.vclock;
-- At the limit (what a claim most often finds while the slots are busy): nothing more to read.
IF EXISTS (
  SELECT 1 FROM ${t("flow_limits")} l
   WHERE l.topic = ANY(limited)
     AND (l.max_in_flight IS NULL
          OR l.max_in_flight > ${takenBy(t, TOPIC_LIMITS, "l.topic")})
     AND (l.rate_limit IS NULL
          OR ${bucket(t, "l", ownRate, "clk")} >= 1))
THEN
  IF array_length(limited, 1) = 1
     AND NOT EXISTS (
       SELECT 1 FROM ${t("flow_limits")} l
        WHERE l.topic = limited[1]
          AND (l.rate_limit IS NOT NULL OR l.group_rate_limit IS NOT NULL OR l.group_max_in_flight IS NOT NULL))
     AND NOT EXISTS (SELECT 1 FROM ${t("flow_group_limits")} g WHERE g.topic = limited[1])
     AND NOT EXISTS (
       SELECT 1 FROM ${t("outbox")} o
        WHERE o.topic = limited[1] AND o.group_key > '' AND o.projected_at IS NULL AND o.dead_at IS NULL) THEN
    -- One limited topic with nothing for fair share to choose between (no rate, no per-group limit
    -- or weight, no open message with a named group; it comes this way without an in-flight limit):
    -- the open claim, keyed runs included, narrowed to it and to what its limit leaves, recording
    -- what it took. (The long way cost a no-op claim of 500 about 13 ms, this one about 7.4 ms.)
    SELECT CASE WHEN l.max_in_flight IS NULL THEN $2
                ELSE least($2, greatest(l.max_in_flight
                  - ${takenBy(t, TOPIC_LIMITS, "l.topic")}, 0))::integer
                END
      INTO free FROM ${t("flow_limits")} l WHERE l.topic = limited[1];
    RETURN QUERY
    WITH claimed AS (
      SELECT * FROM ${t("outbox_claim_open")}($1, free, $3, limited, $5, $6, true)),
    recorded AS (
      INSERT INTO ${t("flow_claims")} (topic, group_key, entries, generations, taken)
      SELECT c.topic, c.group_key, array_agg(c.id::bigint), array_agg(c.generation::bigint), count(*)
        FROM claimed c WHERE NOT c.exhausted
       GROUP BY c.topic, c.group_key)
    SELECT * FROM claimed;
    GET DIAGNOSTICS taken = ROW_COUNT;
  ELSE
    RETURN QUERY SELECT * FROM ${t("outbox_claim_fair")}($1, $2, $3, $4, $5, $6, limited, clk);
    GET DIAGNOSTICS taken = ROW_COUNT;
  END IF;
END IF;
-- The rest of the batch from the topics without limits, if the claim may take any.
IF taken < $2 AND ($4 IS NULL OR EXISTS (
     SELECT 1 FROM unnest($4) x(topic)
      WHERE NOT EXISTS (SELECT 1 FROM ${t("flow_limits")} l WHERE l.topic = x.topic))) THEN
  RETURN QUERY SELECT * FROM ${t("outbox_claim_open")}($1, $2 - taken, $3, $4, $5, $6, false);
END IF;
END
$claim$`
