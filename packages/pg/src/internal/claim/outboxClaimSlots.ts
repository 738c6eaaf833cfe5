/**
 * The outbox claim of one topic with nothing but an in-flight limit: it takes capacity slots
 * (advisory locks) instead of the limits row, so such claims run at once, and two claims never
 * hold the same slot; it takes at most what its slots leave and records it under them.
 */
import type { Tables } from "../flow/limits.js"

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
-- weight, no open message with a named group) and its in-flight limit \`cap\`. It takes slots, each
-- an advisory lock, those that seem to leave the most first, trying each without waiting, and
-- counts each as it takes it, in a statement of its own (a snapshot that sees every claim that
-- held the slot before): the \`taken\` of the slot's rows of flow_claims, recounted exactly, oldest
-- row first, only where that leaves less than the claim could use of the slot or the rows piled
-- up. It stops once its slots leave what it asks for; only if a first round over the slots took
-- none does it wait, for the one that seemed to leave the most, then try the others again. A
-- slot's rows are only added to by its holder, within its share: together they stay within the
-- limit.
--
-- Why a slot's room is its share less what its rows took less \`slot_overflow\` (the slots' excess
-- over their shares, in all, read once the first slot is held). Only a claim that holds every
-- slot (the other way) or no claim at all (a new limit, recorded round robin over the slots) writes
-- past a share, so while a claim holds a slot the excess can only shrink, and every claim under way
-- read one at least as large as it is now. A slot over its share gives nothing. A slot under its
-- share ends at most at its share less the excess a claim read, so if any such slot gave anything,
-- the slots under their shares leave at least the excess unused between them, and the whole stays
-- within the limit; if none did, nothing was added.
--
-- A recount skips the rows another claim is recounting (SKIP LOCKED) and keeps their \`taken\`,
-- which only ever overstates: no claim waits for another's rows, so no two deadlock. A slot's lock
-- is the two-key advisory lock (hashtext of the claims table and the topic, the slot): two topics
-- whose keys collide share slots, which costs waiting, never a count.
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
  taken integer := 0;
BEGIN
-- The slots, those that seem to leave the most first (as committed now; each is counted once held).
slot_order := ARRAY(
  SELECT s.n FROM generate_series(0, slot_count - 1) s(n)
   ORDER BY coalesce((SELECT sum(c.taken) FROM ${t("flow_claims")} c WHERE c.topic = limited_topic AND c.slot = s.n), 0)
            - ${t("flow_slot_share")}(cap, s.n), random());
-- Two rounds over the slots, each taken only if no claim holds it; if the first round took none,
-- the second begins by waiting for the slot that seemed to leave the most.
FOR slot_i IN 1 .. 2 * slot_count LOOP
  slot_no := slot_order[1 + (slot_i - 1) % slot_count];
  CONTINUE WHEN slot_no = ANY(held_slots);
  IF slot_i = slot_count + 1 AND cardinality(held_slots) = 0 THEN
    PERFORM pg_advisory_xact_lock(hashtext('${t("flow_claims")}:' || limited_topic), slot_no);
  ELSE
    CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtext('${t("flow_claims")}:' || limited_topic), slot_no);
  END IF;
  -- A new snapshot from here on: every claim that held this slot before has committed.
  IF cardinality(held_slots) = 0 THEN
    -- No claim of the other way runs while a slot is held: what is over the shares now can only shrink.
    slot_overflow := (SELECT coalesce(sum(greatest(o.n - ${t("flow_slot_share")}(cap, o.slot), 0)), 0)
                        FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("flow_claims")} c
                               WHERE c.topic = limited_topic GROUP BY c.slot) o);
    IF slot_overflow > 0 THEN
      -- Rows written past a slot's share (by a claim that held every slot, a new limit): counted exactly.
      FOR slot_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${t("flow_claims")} c
         WHERE c.topic = limited_topic AND c.slot IN (
           SELECT o.slot FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("flow_claims")} c
                                WHERE c.topic = limited_topic GROUP BY c.slot) o
            WHERE o.n > ${t("flow_slot_share")}(cap, o.slot))
         ORDER BY c.id FOR UPDATE SKIP LOCKED LOOP
        -- Each message probed by id (a scalar subquery: an EXISTS was planned as a semi-join that
        -- read every open message).
        slot_still := (SELECT count(*) FROM unnest(slot_row.entries, slot_row.generations) u(id, generation) WHERE coalesce((
   SELECT true FROM ${t("outbox")} o
    WHERE o.id = u.id AND o.claim_generation = u.generation AND o.projected_at IS NULL AND o.dead_at IS NULL
      AND o.claimed_until > now()), false));
        IF slot_still = 0 THEN
          DELETE FROM ${t("flow_claims")} c WHERE c.id = slot_row.id;
        ELSIF slot_still < slot_row.taken THEN
          UPDATE ${t("flow_claims")} c SET taken = slot_still WHERE c.id = slot_row.id;
        END IF;
      END LOOP;
      slot_overflow := (SELECT coalesce(sum(greatest(o.n - ${t("flow_slot_share")}(cap, o.slot), 0)), 0)
                          FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("flow_claims")} c
                                 WHERE c.topic = limited_topic GROUP BY c.slot) o);
    END IF;
  END IF;
  held_slots := held_slots || slot_no;
  slot_share := ${t("flow_slot_share")}(cap, slot_no);
  SELECT coalesce(sum(c.taken), 0), count(*) INTO slot_taken, slot_rows
    FROM ${t("flow_claims")} c WHERE c.topic = limited_topic AND c.slot = slot_no;
  -- Counted exactly, oldest claim first (the likeliest settled), only where the sum of \`taken\`
  -- leaves less than the claim could use of this slot, or the rows piled up.
  IF slot_share - slot_taken - slot_overflow < least($2 - room, slot_share) OR slot_rows > 32 THEN
    FOR slot_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${t("flow_claims")} c
       WHERE c.topic = limited_topic AND c.slot = slot_no ORDER BY c.id FOR UPDATE SKIP LOCKED LOOP
      EXIT WHEN slot_share - slot_taken - slot_overflow >= least($2 - room, slot_share) AND slot_rows <= 32;
      slot_still := (SELECT count(*) FROM unnest(slot_row.entries, slot_row.generations) u(id, generation) WHERE coalesce((
   SELECT true FROM ${t("outbox")} o
    WHERE o.id = u.id AND o.claim_generation = u.generation AND o.projected_at IS NULL AND o.dead_at IS NULL
      AND o.claimed_until > now()), false));
      IF slot_still = 0 THEN
        DELETE FROM ${t("flow_claims")} c WHERE c.id = slot_row.id;
        slot_rows := slot_rows - 1;
      ELSIF slot_still < slot_row.taken THEN
        UPDATE ${t("flow_claims")} c SET taken = slot_still WHERE c.id = slot_row.id;
      END IF;
      slot_taken := slot_taken - slot_row.taken + slot_still;
    END LOOP;
  END IF;
  slot_rooms := slot_rooms || greatest(least(slot_share - slot_taken - slot_overflow, $2 - room), 0)::integer;
  room := room + slot_rooms[cardinality(slot_rooms)];
  EXIT WHEN room >= $2;
END LOOP;
IF room > 0 THEN
  -- The topic claimed the open way, within what the slots leave; what it took (exhausted rows take
  -- nothing) recorded under the slots, numbered in id order: each held slot records its range.
  -- Each message's group comes back with it, so one enqueued with a named group since the claim
  -- chose this way is recorded under its group (the next claim sees the group and takes the long
  -- way).
  RETURN QUERY
  WITH claimed AS (
    SELECT * FROM ${t("outbox_claim_open")}($1, room, $3, ARRAY[limited_topic], $5, $6, true)),
  -- Materialized: a join to the arrays in place would unnest them again for every row claimed.
  ranges AS MATERIALIZED (
    SELECT h.slot, sum(h.room) OVER (ORDER BY h.nth) - h.room AS after, sum(h.room) OVER (ORDER BY h.nth) AS upto
      FROM unnest(held_slots, slot_rooms) WITH ORDINALITY h(slot, room, nth)),
  recorded AS (
    INSERT INTO ${t("flow_claims")} (topic, group_key, slot, entries, generations, taken)
    SELECT limited_topic, c.group_key, c.slot, array_agg(c.id), array_agg(c.generation), count(*)
      FROM (SELECT c.*, r.slot
              FROM (SELECT c.id::bigint AS id, c.generation::bigint AS generation, c.group_key,
                           row_number() OVER (ORDER BY c.id::bigint) AS nth
                      FROM claimed c WHERE NOT c.exhausted) c
              JOIN ranges r ON c.nth > r.after AND c.nth <= r.upto) c
     GROUP BY c.group_key, c.slot)
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
