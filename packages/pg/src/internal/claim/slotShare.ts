/**
 * A limit's capacity slots, written once for every claim that takes or records them: how many
 * slots a limit has and the share of the limit each holds (the shares sum to the limit). Plain
 * expressions in IMMUTABLE SQL functions, so the planner inlines them where they are used.
 */
import { slotCount } from "../flow/capacity.js"
import type { Tables } from "../flow/limits.js"

export const slotShare = (t: Tables) => [
  `-- How many capacity slots an in-flight limit of \`cap\` has: one per 16 (small, so that modest limits run
-- claims at once too, and a claim's unused remainder of a slot is small), at least 1 and at most 8 (how
-- many claims of one topic run at once without waiting).
CREATE FUNCTION ${t("flow_slots")}(cap integer)
  RETURNS integer
  LANGUAGE sql IMMUTABLE
AS $slots$
SELECT ${slotCount("cap")}
$slots$`,
  `-- The share of a limit of \`cap\` that slot \`slot\` holds: the limit over the slots, the remainder one each to
-- the first ones; nothing for a slot past the last (rows a larger limit left there).
CREATE FUNCTION ${t("flow_slot_share")}(cap integer, slot integer)
  RETURNS integer
  LANGUAGE sql IMMUTABLE
AS $share$
SELECT CASE WHEN slot < ${t("flow_slots")}(cap)
            THEN cap / ${t("flow_slots")}(cap) + CASE WHEN slot < cap % ${t("flow_slots")}(cap) THEN 1 ELSE 0 END
            ELSE 0 END
$share$`
]
