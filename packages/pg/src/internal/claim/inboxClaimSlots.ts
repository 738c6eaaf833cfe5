/**
 * The stored inbox claim of a consumer with nothing but an in-flight limit: it takes capacity
 * slots (advisory locks) instead of the limits row, so such claims run at once, and two claims
 * never hold the same slot; it takes at most what its slots leave and records it under them
 * (`takeSlots.ts`: how, and why that keeps within the limit).
 */
import { CONSUMER_LIMITS, type Tables } from "../flow/limits.js"
import { recordUnderSlots, slotVariables, takeSlots } from "./takeSlots.js"

export const inboxClaimSlots = (t: Tables) =>
  `CREATE FUNCTION ${t("inbox_claim_slots")}(text, integer, double precision, text, integer, cap integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    consumer text, message_id text, payload jsonb, headers jsonb, received_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
-- The claim's arguments ($1-$5, as inbox_claim's) and the consumer's in-flight limit \`cap\`.
DECLARE
${slotVariables(t)}
BEGIN
${takeSlots(t, CONSUMER_LIMITS, "$4")}
IF room < 1 THEN
  RETURN;
END IF;
-- The consumer claimed the open way, within what the slots leave, and what it took recorded.
RETURN QUERY
WITH claimed AS (
  SELECT * FROM ${t("inbox_claim_open")}($1, room, $3, $4, $5)),
${recordUnderSlots(t, CONSUMER_LIMITS, "$4")}
SELECT * FROM claimed;
END
$claim$`
