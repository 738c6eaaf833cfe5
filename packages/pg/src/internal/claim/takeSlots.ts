/**
 * How a claim of a queue key with nothing but an in-flight limit takes its capacity slots, written
 * once for the outbox (a topic) and the stored inbox (a consumer): the PL/pgSQL variables and the
 * loop that leaves `held_slots`, `slot_rooms` (what each held slot leaves, in the order taken) and
 * `room` (their sum, at most what the claim asks for, `$2`).
 *
 * It takes slots, each an advisory lock, those that seem to leave the most first, trying each
 * without waiting, and counts each as it takes it, in a statement of its own (a snapshot that sees
 * every claim that held the slot before): the `taken` of the slot's claim rows, recounted exactly,
 * oldest row first, only where that leaves less than the claim could use of the slot or the rows
 * piled up. It stops once its slots leave what it asks for; only if a first round over the slots
 * took none does it wait, for the one that seemed to leave the most, then try the others again. A
 * slot's rows are only added to by its holder, within its share: together they stay within the
 * limit.
 *
 * Why a slot's room is its share less what its rows took less `slot_overflow` (the slots' excess
 * over their shares, in all, read once the first slot is held). Only a claim that holds every
 * slot (the other way) or no claim at all (a new limit, recorded round robin over the slots)
 * writes past a share, so while a claim holds a slot the excess can only shrink, and every claim
 * under way read one at least as large as it is now. A slot over its share gives nothing. A slot
 * under its share ends at most at its share less the excess a claim read, so if any such slot
 * gave anything, the slots under their shares leave at least the excess unused between them, and
 * the whole stays within the limit; if none did, nothing was added.
 *
 * A recount skips the rows another claim is recounting (SKIP LOCKED) and keeps their `taken`,
 * which only ever overstates: no claim waits for another's rows, so no two deadlock.
 */
import { entriesHeld, slotLock, takenBy } from "../flow/capacity.js"
import type { Limits, Tables } from "../flow/limits.js"

/** The variables the loop uses, for the function's DECLARE (`cap`: the function's limit argument). */
export const slotVariables = (t: Tables) =>
  `  slot_count integer := ${t("flow_slots")}(cap);
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
  slot_still integer;`

/** The loop over the slots of `key` (SQL: the claim's topic or consumer argument) of `q`. */
export const takeSlots = (t: Tables, q: Limits, key: string) => {
  const claims = t(q.claims)
  const ofKey = `c.${q.key} = ${key}`
  const overflow = `(SELECT coalesce(sum(greatest(o.n - ${t("flow_slot_share")}(cap, o.slot), 0)), 0)
                        FROM (SELECT c.slot, sum(c.taken) AS n FROM ${claims} c
                               WHERE ${ofKey} GROUP BY c.slot) o)`
  return `-- How the slots are taken, and why their rooms keep the whole within the limit: internal/claim/takeSlots.ts.
-- The slots, those that seem to leave the most first (as committed now; each is counted once held).
slot_order := ARRAY(
  SELECT s.n FROM generate_series(0, slot_count - 1) s(n)
   ORDER BY ${takenBy(t, q, key, "s.n")}
            - ${t("flow_slot_share")}(cap, s.n), random());
-- Two rounds over the slots, each taken only if no claim holds it; if the first round took none,
-- the second begins by waiting for the slot that seemed to leave the most.
FOR slot_i IN 1 .. 2 * slot_count LOOP
  slot_no := slot_order[1 + (slot_i - 1) % slot_count];
  CONTINUE WHEN slot_no = ANY(held_slots);
  IF slot_i = slot_count + 1 AND cardinality(held_slots) = 0 THEN
    PERFORM pg_advisory_xact_lock(${slotLock(t, q, key, "slot_no")});
  ELSE
    CONTINUE WHEN NOT pg_try_advisory_xact_lock(${slotLock(t, q, key, "slot_no")});
  END IF;
  -- A new snapshot from here on: every claim that held this slot before has committed.
  IF cardinality(held_slots) = 0 THEN
    -- No claim of the other way runs while a slot is held: what is over the shares now can only shrink.
    slot_overflow := ${overflow};
    IF slot_overflow > 0 THEN
      -- Rows written past a slot's share (by a claim that held every slot, a new limit): counted exactly.
      FOR slot_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${claims} c
         WHERE ${ofKey} AND c.slot IN (
           SELECT o.slot FROM (SELECT c.slot, sum(c.taken) AS n FROM ${claims} c
                                WHERE ${ofKey} GROUP BY c.slot) o
            WHERE o.n > ${t("flow_slot_share")}(cap, o.slot))
         ORDER BY c.id FOR UPDATE SKIP LOCKED LOOP
        slot_still := ${entriesHeld(t, q, "slot_row")};
        IF slot_still = 0 THEN
          DELETE FROM ${claims} c WHERE c.id = slot_row.id;
        ELSIF slot_still < slot_row.taken THEN
          UPDATE ${claims} c SET taken = slot_still WHERE c.id = slot_row.id;
        END IF;
      END LOOP;
      slot_overflow := ${overflow};
    END IF;
  END IF;
  held_slots := held_slots || slot_no;
  slot_share := ${t("flow_slot_share")}(cap, slot_no);
  SELECT coalesce(sum(c.taken), 0), count(*) INTO slot_taken, slot_rows
    FROM ${claims} c WHERE ${ofKey} AND c.slot = slot_no;
  -- Counted exactly, oldest claim first (the likeliest settled), only where the sum of \`taken\`
  -- leaves less than the claim could use of this slot, or the rows piled up.
  IF slot_share - slot_taken - slot_overflow < least($2 - room, slot_share) OR slot_rows > 32 THEN
    FOR slot_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${claims} c
       WHERE ${ofKey} AND c.slot = slot_no ORDER BY c.id FOR UPDATE SKIP LOCKED LOOP
      EXIT WHEN slot_share - slot_taken - slot_overflow >= least($2 - room, slot_share) AND slot_rows <= 32;
      slot_still := ${entriesHeld(t, q, "slot_row")};
      IF slot_still = 0 THEN
        DELETE FROM ${claims} c WHERE c.id = slot_row.id;
        slot_rows := slot_rows - 1;
      ELSIF slot_still < slot_row.taken THEN
        UPDATE ${claims} c SET taken = slot_still WHERE c.id = slot_row.id;
      END IF;
      slot_taken := slot_taken - slot_row.taken + slot_still;
    END LOOP;
  END IF;
  slot_rooms := slot_rooms || greatest(least(slot_share - slot_taken - slot_overflow, $2 - room), 0)::integer;
  room := room + slot_rooms[cardinality(slot_rooms)];
  EXIT WHEN room >= $2;
END LOOP;`
}

/**
 * Two common table expressions for the claim's final statement, after `claimed` (the rows the
 * claim took): what it took (exhausted entries take nothing) recorded under the held slots,
 * numbered in id order, each held slot recording its range. `by`: columns of the claimed rows
 * each record keeps too (a message's group, so that the next claim sees it).
 */
export const recordUnderSlots = (t: Tables, q: Limits, key: string, by: ReadonlyArray<string> = []) => {
  const kept = by.map((column) => `, c.${column}`).join("")
  return `-- Materialized: a join to the arrays in place would unnest them again for every entry claimed.
ranges AS MATERIALIZED (
  SELECT h.slot, sum(h.room) OVER (ORDER BY h.nth) - h.room AS after, sum(h.room) OVER (ORDER BY h.nth) AS upto
    FROM unnest(held_slots, slot_rooms) WITH ORDINALITY h(slot, room, nth)),
recorded AS (
  INSERT INTO ${t(q.claims)} (${[q.key, ...by].join(", ")}, slot, entries, generations, taken)
  SELECT ${key}${kept}, c.slot, array_agg(c.id), array_agg(c.generation), count(*)
    FROM (SELECT c.*, r.slot
            FROM (SELECT c.id::bigint AS id, c.generation::bigint AS generation${kept},
                         row_number() OVER (ORDER BY c.id::bigint) AS nth
                    FROM claimed c WHERE NOT c.exhausted) c
            JOIN ranges r ON c.nth > r.after AND c.nth <= r.upto) c
   GROUP BY ${by.map((column) => `c.${column}, `).join("")}c.slot)`
}
