/**
 * The stored inbox claim of a consumer with nothing but an in-flight limit: it takes capacity
 * slots (advisory locks) instead of the limits row, so such claims run at once, and two claims
 * never hold the same slot; it takes at most what its slots leave and records it under them.
 */
import type { Tables } from "../flow/limits.js"

export const inboxClaimSlots = (t: Tables) =>
  `CREATE FUNCTION ${t("inbox_claim_slots")}(text, integer, double precision, text, integer, cap integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    consumer text, message_id text, payload jsonb, headers jsonb, received_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
-- The claim's arguments ($1-$5, as inbox_claim's) and the consumer's in-flight limit \`cap\`. The
-- slots are the outbox's (outbox_claim_slots says why their rooms keep the whole within the
-- limit): taken without waiting, those that seem to leave the most first, each counted in a
-- statement of its own once held, exactly where the sum of \`taken\` leaves too little.
DECLARE
  slot_count integer := ${t("flow_slots")}(cap);
  slot_order integer[];
  held_slots integer[] := '{}';
  slot_rooms integer[] := '{}';
  room integer := 0;
  slot_i integer;
  slot_no integer;
  slot_share integer;
  slot_overflow bigint;
  slot_taken bigint;
  slot_rows bigint;
  slot_row record;
  slot_still integer;
BEGIN
-- The slots, those that seem to leave the most first (as committed now; each is counted once held).
slot_order := ARRAY(
  SELECT s.n FROM generate_series(0, slot_count - 1) s(n)
   ORDER BY coalesce((SELECT sum(c.taken) FROM ${t("inbox_flow_claims")} c WHERE c.consumer = $4 AND c.slot = s.n), 0)
            - ${t("flow_slot_share")}(cap, s.n), random());
-- Two rounds over the slots, each taken only if no claim holds it; if the first round took none,
-- the second begins by waiting for the slot that seemed to leave the most.
FOR slot_i IN 1 .. 2 * slot_count LOOP
  slot_no := slot_order[1 + (slot_i - 1) % slot_count];
  CONTINUE WHEN slot_no = ANY(held_slots);
  IF slot_i = slot_count + 1 AND cardinality(held_slots) = 0 THEN
    PERFORM pg_advisory_xact_lock(hashtext('${t("inbox_flow_claims")}:' || $4), slot_no);
  ELSE
    CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtext('${t("inbox_flow_claims")}:' || $4), slot_no);
  END IF;
  -- A new snapshot from here on: every claim that held this slot before has committed.
  IF cardinality(held_slots) = 0 THEN
    -- No claim of the other way runs while a slot is held: what is over the shares now can only shrink.
    slot_overflow := (SELECT coalesce(sum(greatest(o.n - ${t("flow_slot_share")}(cap, o.slot), 0)), 0)
                        FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("inbox_flow_claims")} c
                               WHERE c.consumer = $4 GROUP BY c.slot) o);
    IF slot_overflow > 0 THEN
      -- Rows written past a slot's share (by a claim that held every slot, a new limit): counted exactly.
      FOR slot_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${t("inbox_flow_claims")} c
         WHERE c.consumer = $4 AND c.slot IN (
           SELECT o.slot FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("inbox_flow_claims")} c
                                WHERE c.consumer = $4 GROUP BY c.slot) o
            WHERE o.n > ${t("flow_slot_share")}(cap, o.slot))
         ORDER BY c.id FOR UPDATE SKIP LOCKED LOOP
        -- Each entry probed by id (a scalar subquery: an EXISTS may be planned as a semi-join over
        -- the whole inbox).
        slot_still := (SELECT count(*) FROM unnest(slot_row.entries, slot_row.generations) u(id, generation) WHERE coalesce((
       SELECT true FROM ${t("inbox")} i
        WHERE i.id = u.id AND i.claim_generation = u.generation AND i.processed_at IS NULL
          AND i.dead_at IS NULL AND i.claimed_until > now()), false));
        IF slot_still = 0 THEN
          DELETE FROM ${t("inbox_flow_claims")} c WHERE c.id = slot_row.id;
        ELSIF slot_still < slot_row.taken THEN
          UPDATE ${t("inbox_flow_claims")} c SET taken = slot_still WHERE c.id = slot_row.id;
        END IF;
      END LOOP;
      slot_overflow := (SELECT coalesce(sum(greatest(o.n - ${t("flow_slot_share")}(cap, o.slot), 0)), 0)
                          FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("inbox_flow_claims")} c
                                 WHERE c.consumer = $4 GROUP BY c.slot) o);
    END IF;
  END IF;
  held_slots := held_slots || slot_no;
  slot_share := ${t("flow_slot_share")}(cap, slot_no);
  SELECT coalesce(sum(c.taken), 0), count(*) INTO slot_taken, slot_rows
    FROM ${t("inbox_flow_claims")} c WHERE c.consumer = $4 AND c.slot = slot_no;
  -- Counted exactly, oldest claim first (the likeliest settled), only where the sum of \`taken\`
  -- leaves less than the claim could use of this slot, or the rows piled up.
  IF slot_share - slot_taken - slot_overflow < least($2 - room, slot_share) OR slot_rows > 32 THEN
    FOR slot_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${t("inbox_flow_claims")} c
       WHERE c.consumer = $4 AND c.slot = slot_no ORDER BY c.id FOR UPDATE SKIP LOCKED LOOP
      EXIT WHEN slot_share - slot_taken - slot_overflow >= least($2 - room, slot_share) AND slot_rows <= 32;
      slot_still := (SELECT count(*) FROM unnest(slot_row.entries, slot_row.generations) u(id, generation) WHERE coalesce((
       SELECT true FROM ${t("inbox")} i
        WHERE i.id = u.id AND i.claim_generation = u.generation AND i.processed_at IS NULL
          AND i.dead_at IS NULL AND i.claimed_until > now()), false));
      IF slot_still = 0 THEN
        DELETE FROM ${t("inbox_flow_claims")} c WHERE c.id = slot_row.id;
        slot_rows := slot_rows - 1;
      ELSIF slot_still < slot_row.taken THEN
        UPDATE ${t("inbox_flow_claims")} c SET taken = slot_still WHERE c.id = slot_row.id;
      END IF;
      slot_taken := slot_taken - slot_row.taken + slot_still;
    END LOOP;
  END IF;
  slot_rooms := slot_rooms || greatest(least(slot_share - slot_taken - slot_overflow, $2 - room), 0)::integer;
  room := room + slot_rooms[cardinality(slot_rooms)];
  EXIT WHEN room >= $2;
END LOOP;
IF room < 1 THEN
  RETURN;
END IF;
-- The consumer claimed the open way, within what the slots leave; what it took (exhausted entries
-- take nothing) recorded under the slots, numbered in id order: each held slot records its range.
RETURN QUERY
WITH claimed AS (
  SELECT * FROM ${t("inbox_claim_open")}($1, room, $3, $4, $5)),
-- Materialized: a join to the arrays in place would unnest them again for every entry claimed.
ranges AS MATERIALIZED (
  SELECT h.slot, sum(h.room) OVER (ORDER BY h.nth) - h.room AS after, sum(h.room) OVER (ORDER BY h.nth) AS upto
    FROM unnest(held_slots, slot_rooms) WITH ORDINALITY h(slot, room, nth)),
recorded AS (
  INSERT INTO ${t("inbox_flow_claims")} (consumer, slot, entries, generations, taken)
  SELECT $4, c.slot, array_agg(c.id), array_agg(c.generation), count(*)
    FROM (SELECT c.*, r.slot
            FROM (SELECT c.id::bigint AS id, c.generation::bigint AS generation,
                         row_number() OVER (ORDER BY c.id::bigint) AS nth
                    FROM claimed c WHERE NOT c.exhausted) c
            JOIN ranges r ON c.nth > r.after AND c.nth <= r.upto) c
   GROUP BY c.slot)
SELECT * FROM claimed;
END
$claim$`
