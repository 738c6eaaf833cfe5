/**
 * The outbox claim of one topic with nothing but an in-flight limit: it takes capacity slots
 * (advisory locks) instead of the limits row, so such claims run at once, and two claims never
 * hold the same slot; it takes at most what its slots leave and records it under them
 * (`takeSlots.ts`: how, and why that keeps within the limit).
 */
import { type Tables, TOPIC_LIMITS } from "../flow/limits.js"
import { recordUnderSlots, slotVariables, takeSlots } from "./takeSlots.js"

export const outboxClaimSlots = (t: Tables) =>
  `CREATE FUNCTION ${t("outbox_claim_slots")}(text, integer, double precision, text[], integer, integer,
    limited_topic text, cap integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    topic text, ordering_key text, payload jsonb, headers jsonb, created_at text, group_key text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
  SET enable_sort = off
  SET jit = off
AS $claim$
#variable_conflict use_column
-- The claim's arguments ($1-$6, as outbox_claim's), the topic (no rate, no per-group limit or
-- weight, no open message with a named group) and its in-flight limit \`cap\`.
DECLARE
${slotVariables(t)}
  taken integer := 0;
BEGIN
${takeSlots(t, TOPIC_LIMITS, "limited_topic")}
IF room > 0 THEN
  -- The topic claimed the open way, within what the slots leave; what it took (exhausted rows take
  -- nothing) recorded under the slots, numbered in id order: each held slot records its range.
  -- Each message's group comes back with it, so one enqueued with a named group since the claim
  -- chose this way is recorded under its group (the next claim sees the group and takes the long
  -- way).
  RETURN QUERY
  WITH claimed AS (
    SELECT * FROM ${t("outbox_claim_open")}($1, room, $3, ARRAY[limited_topic], $5, $6, true)),
${recordUnderSlots(t, TOPIC_LIMITS, "limited_topic", ["group_key"])}
  SELECT * FROM claimed;
  GET DIAGNOSTICS taken = ROW_COUNT;
END IF;
-- The rest of the batch from the topics without limits, if the claim may take any.
IF taken < $2 AND ($4 IS NULL OR EXISTS (
     SELECT 1 FROM unnest($4) x(topic)
      WHERE NOT EXISTS (SELECT 1 FROM ${t("flow_limits")} l WHERE l.topic = x.topic))) THEN
  RETURN QUERY SELECT * FROM ${t("outbox_claim_open")}($1, $2 - taken, $3, $4, $5, $6, false);
END IF;
END
$claim$`
