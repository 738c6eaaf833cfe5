/**
 * Version 27, released: never edit it (a test holds its text); add the next version instead.
 *
 * Claims of one limited topic (or inbox consumer) no longer take turns. Since version 17 every
 * claim of a limited topic locked the topic's limits row (`FOR UPDATE`) until it committed, so
 * its claims ran one at a time: with three batch loops claiming 500 each under a limit that
 * never bound, a claim waited about 12 ms for that lock and ran for about 7 (`auto_explain` of
 * the claim function, 2026-12-05). Under a limit of 2,000 a no-op drain ran at 0.76x its rate
 * without one on the outbox and 0.67x on the inbox (full bench runs of version 26).
 *
 * A limit is split into capacity slots: the limit over 16, at least 1 and at most 8, each
 * holding its share of the limit (`budget`: the shares sum to the limit; a limit under 32 has
 * one slot, and its claims take turns as before). A claim of one topic with nothing but an
 * in-flight limit (no rate, no per-group limit or weight, no open message with a named group;
 * for the inbox, a consumer without a rate) does not lock the limits row. It takes slots, each
 * an advisory lock, the ones that seem to leave the most first, trying each without waiting,
 * and counts each as it takes it, in a statement of its own (a snapshot that sees every claim
 * that held the slot before): the `taken` of the slot's rows of `flow_claims`
 * (`inbox_flow_claims`; each row now names its slot), recounted exactly, oldest row first, only
 * where that leaves less than the claim could use of the slot or the rows piled up. It stops
 * once its slots leave what it asks for; only if a first round over the slots took none does it
 * wait, for the one that seemed to leave the most, then try the others again. It takes at most
 * what its slots leave and records what it took under them. Two claims never hold the same slot
 * and a slot's rows are only added to by its holder, within its share: together they stay
 * within the limit.
 *
 * Rows written while no slot was held — by a limit set below what is in flight (`FlowControl`
 * records what is in flight afresh, round robin over the slots, at every limit it sets), by a
 * claim of the other way past an excess already there, or by the previous release (slot 0) —
 * can put a slot over its share.
 * Their excess, in all, is taken from the room of every slot (`takeSlots` says why that keeps
 * the whole within the limit), so it costs up to (slots - 1) times its size in room until it
 * settles; a claim that finds any recounts the rows of the slots over their share first.
 *
 * Every other limited claim (rates, per-group limits, fair share, several limited topics in one
 * claim) locks the limits rows as before, then every slot of its topics in order, waiting for
 * the claims that hold them (and before it reads the buckets' clock): none is under way while
 * it counts as version 26 did, and it records what it took under the slots, within their
 * shares. Rows a process of the previous release wrote to `flow_leases` send a claim this way:
 * they are moved in only while every slot is held.
 *
 * A recount skips the rows another claim is recounting (`SKIP LOCKED`) and keeps their `taken`,
 * which only ever overstates: no claim waits for another's rows, so no two deadlock.
 *
 * A slot's lock is the two-key advisory lock (`hashtext` of the claims table and the topic or
 * consumer; the slot): two topics whose keys collide share slots, which costs waiting, never a
 * count. The migration first takes the locks a new limit takes, so no claim is under way while
 * the functions change. As in version 26 one window is left: a claim that called a function
 * while the migration held them runs the previous body once, under the limits row only, beside
 * claims that take slots. Pause the limited topics during the upgrade where a limit must hold
 * through it. The functions keep their signatures.
 */
import type { Migration } from "../../Migrations.js"
import { inboxClaimQuery } from "./0008_leases_pauses_lookup.js"
import { limitsLock } from "./0017_flow_limits.js"
import { claimWithRates } from "./0018_rate_limits.js"
import { heldById } from "./0022_prune_by_id.js"
import {
  CONSUMER_LIMITS,
  entriesHeld,
  inboxClaimed,
  inboxClaimSignature,
  inboxHeld,
  limitedInboxClaim,
  limitedInboxDeclare
} from "./0025_inbox_limits.js"
import { capacityPerClaim, claimOf26, namedOpen, singleTopicWhen } from "./0026_claim_rows.js"

/**
 * How much of a limit one slot holds at least (a smaller limit has fewer slots): small, so that
 * modest limits run claims at once too, and a claim's unused remainder of a slot is small.
 */
const SLOT_SIZE = 16
/** The most slots of a limit: how many claims of one topic run at once without waiting. */
const MAX_SLOTS = 8
/** The most rows of a slot before a claim counts its oldest exactly, whatever the room. */
const MAX_SLOT_ROWS = 32

/** How a queue's claims keep their capacity per slot. */
interface Slots {
  /** The claim rows' table (qualified). */
  readonly claims: string
  /** The column naming what is limited (`topic`, `consumer`). */
  readonly key: string
  /** This claim's topic or consumer, SQL. */
  readonly value: string
  /** The in-flight limit, a variable of the function (not NULL). */
  readonly cap: string
  /** That the entry `u.id` claimed at `u.generation` still holds its capacity. */
  readonly held: string
}

/** How many slots a limit of `cap` has. */
export const slotCount = (cap: string) => `least(${MAX_SLOTS}, greatest(1, ${cap} / ${SLOT_SIZE}))`

/** The first key of the slots' advisory locks for `value` (the second is the slot). */
const slotLock = (claims: string, value: string) => `hashtext('${claims}:' || ${value})`

/**
 * The share of the limit slot `n` holds: the limit over the slots, the remainder one each to the
 * first ones; nothing for a slot past the last (rows a larger limit left there).
 */
const budget = (s: Slots, n: string) => shareOf(s.cap, "slot_count", n)

/** The share of a limit `cap` with `count` slots that slot `n` holds. */
const shareOf = (cap: string, count: string, n: string) =>
  `(CASE WHEN ${n} < ${count} THEN ${cap} / ${count} + CASE WHEN ${n} < ${cap} % ${count} THEN 1 ELSE 0 END ELSE 0 END)`

/**
 * What a claim of the other way (holding every slot of its topics) took, recorded under the
 * slots: each topic's messages in id order fill its slots' rooms, slot by slot; only what
 * passes them all (there was an excess already) goes to slot 0. Recorded all in slot 0, it
 * would cost the slots up to (slots - 1) times as much room until it settled.
 */
const recordInSlots = (t: (table: string) => string) => {
  const claims = t("flow_claims")
  const count = slotCount("f.max_in_flight")
  return `INSERT INTO ${claims} (topic, group_key, slot, entries, generations, taken)
  SELECT l.topic, l.group_key, coalesce(r.slot, 0), array_agg(l.id), array_agg(l.claim_generation + 1), count(*)
    FROM (SELECT l.*, row_number() OVER (PARTITION BY l.topic ORDER BY l.id) AS nth FROM locked l) l
    LEFT JOIN (
      SELECT r.topic, r.slot, sum(r.room) OVER w - r.room AS after, sum(r.room) OVER w AS upto
        FROM (
          SELECT f.topic, s.n AS slot, greatest(${shareOf("f.max_in_flight", count, "s.n")} - coalesce((
                   SELECT sum(c.taken) FROM ${claims} c WHERE c.topic = f.topic AND c.slot = s.n), 0), 0) AS room
            FROM ${t("flow_limits")} f CROSS JOIN LATERAL generate_series(0, ${count} - 1) s(n)
           WHERE f.topic = ANY(limited) AND f.max_in_flight IS NOT NULL) r
      WINDOW w AS (PARTITION BY r.topic ORDER BY r.slot)) r
      ON r.topic = l.topic AND l.nth > r.after AND l.nth <= r.upto
   GROUP BY l.topic, l.group_key, coalesce(r.slot, 0)`
}

/** What each slot's rows took, at most (`slot`, `n`). */
const perSlot = (s: Slots) =>
  `SELECT c.slot, sum(c.taken) AS n FROM ${s.claims} c WHERE c.${s.key} = ${s.value} GROUP BY c.slot`

/** By how much the slots are over their shares, in all. */
const overflowOf = (s: Slots) =>
  `(SELECT coalesce(sum(greatest(o.n - ${budget(s, "o.slot")}, 0)), 0) FROM (${perSlot(s)}) o)`

/**
 * Counts the claim row `slot_row` exactly (each entry probed by id): drops it when nothing it took
 * is held any more, else lowers its `taken`.
 */
const recountRow = (s: Slots) =>
  `slot_still := ${entriesHeld("slot_row", s.held)};
      IF slot_still = 0 THEN
        DELETE FROM ${s.claims} c WHERE c.id = slot_row.id;
      ELSIF slot_still < slot_row.taken THEN
        UPDATE ${s.claims} c SET taken = slot_still WHERE c.id = slot_row.id;
      END IF;`

const slotsDeclare = `
  slot_count integer;
  slot_order integer[];
  slot_rooms integer[];
  held_slots integer[];
  room integer;
  slot_i integer;
  slot_no integer;
  slot_overflow bigint;
  slot_taken bigint;
  slot_rows bigint;
  slot_row record;
  slot_still integer;`

/**
 * Takes slots for a claim that asks for `$2`: on return `room` is what it may take,
 * `held_slots` the slots it holds and `slot_rooms` what each leaves (summing to `room`).
 *
 * Why a slot's room is its share less what its rows took less `slot_overflow` (the slots'
 * excess over their shares, in all, read once the first slot is held). Only a claim that holds
 * every slot (the other way) or no claim at all (a new limit) writes past a share, so while a
 * claim holds a slot the excess can only shrink, and every claim under way read one at least as
 * large as it is now. A slot over its share gives nothing. A slot under its share ends at most at
 * its share less the excess a claim read, so if any such slot gave anything, the slots under
 * their shares leave at least the excess unused between them, and the whole stays within the
 * limit; if none did, nothing was added.
 */
const takeSlots = (s: Slots) => {
  const lock = slotLock(s.claims, s.value)
  const rows = (where: string) =>
    `SELECT c.id, c.entries, c.generations, c.taken FROM ${s.claims} c
     WHERE c.${s.key} = ${s.value} AND ${where} ORDER BY c.id FOR UPDATE SKIP LOCKED`
  // What the claim still asks for that slot `slot_no` could give: its share, at most.
  const wanted = `least($2 - room, ${budget(s, "slot_no")})`
  return `slot_count := ${slotCount(s.cap)};
-- The slots, those that seem to leave the most first (as committed now; each is counted once held).
slot_order := ARRAY(
  SELECT s.n FROM generate_series(0, slot_count - 1) s(n)
   ORDER BY coalesce((SELECT sum(c.taken) FROM ${s.claims} c WHERE c.${s.key} = ${s.value} AND c.slot = s.n), 0)
            - ${budget(s, "s.n")}, random());
held_slots := '{}';
slot_rooms := '{}';
room := 0;
-- Two rounds over the slots, each taken only if no claim holds it; if the first round took none,
-- the second begins by waiting for the slot that seemed to leave the most.
FOR slot_i IN 1 .. 2 * slot_count LOOP
  slot_no := slot_order[1 + (slot_i - 1) % slot_count];
  CONTINUE WHEN slot_no = ANY(held_slots);
  IF slot_i = slot_count + 1 AND cardinality(held_slots) = 0 THEN
    PERFORM pg_advisory_xact_lock(${lock}, slot_no);
  ELSE
    CONTINUE WHEN NOT pg_try_advisory_xact_lock(${lock}, slot_no);
  END IF;
  -- A new snapshot from here on: every claim that held this slot before has committed.
  IF cardinality(held_slots) = 0 THEN
    -- No claim of the other way runs while a slot is held: what is over the shares now can only shrink.
    slot_overflow := ${overflowOf(s)};
    IF slot_overflow > 0 THEN
      -- Rows written past a slot's share (by a claim that held every slot, a new limit): counted exactly.
      FOR slot_row IN ${
    rows(`c.slot IN (SELECT o.slot FROM (${perSlot(s)}) o WHERE o.n > ${budget(s, "o.slot")})`)
  } LOOP
        ${recountRow(s)}
      END LOOP;
      slot_overflow := ${overflowOf(s)};
    END IF;
  END IF;
  held_slots := held_slots || slot_no;
  SELECT coalesce(sum(c.taken), 0), count(*) INTO slot_taken, slot_rows
    FROM ${s.claims} c WHERE c.${s.key} = ${s.value} AND c.slot = slot_no;
  -- Counted exactly, oldest claim first (the likeliest settled), only where the sum of \`taken\`
  -- leaves less than the claim could use of this slot, or the rows piled up.
  IF ${budget(s, "slot_no")} - slot_taken - slot_overflow < ${wanted} OR slot_rows > ${MAX_SLOT_ROWS} THEN
    FOR slot_row IN ${rows("c.slot = slot_no")} LOOP
      EXIT WHEN ${budget(s, "slot_no")} - slot_taken - slot_overflow >= ${wanted} AND slot_rows <= ${MAX_SLOT_ROWS};
      ${recountRow(s)}
      IF slot_still = 0 THEN
        slot_rows := slot_rows - 1;
      END IF;
      slot_taken := slot_taken - slot_row.taken + slot_still;
    END LOOP;
  END IF;
  slot_rooms := slot_rooms || greatest(least(${
    budget(s, "slot_no")
  } - slot_taken - slot_overflow, $2 - room), 0)::integer;
  room := room + slot_rooms[cardinality(slot_rooms)];
  EXIT WHEN room >= $2;
END LOOP;`
}

/**
 * The CTE `ranges`: which of the claimed rows, numbered in id order, each held slot records
 * (`after` < n <= `upto`). Materialized: a join to the arrays in place would unnest them again
 * for every row claimed.
 */
const ranges = `ranges AS MATERIALIZED (
  SELECT h.slot, sum(h.room) OVER (ORDER BY h.nth) - h.room AS after, sum(h.room) OVER (ORDER BY h.nth) AS upto
    FROM unnest(held_slots, slot_rooms) WITH ORDINALITY h(slot, room, nth))`

/**
 * The rows of `claimed` that take capacity (not exhausted), with their slot: `id`, `generation`,
 * `slot`, and the columns `also` names (`, expr AS name` each).
 */
const inSlots = (also = "") =>
  `(SELECT c.*, r.slot
     FROM (SELECT c.id::bigint AS id, c.generation::bigint AS generation${also},
                  row_number() OVER (ORDER BY c.id::bigint) AS nth
             FROM claimed c WHERE NOT c.exhausted) c
     JOIN ranges r ON c.nth > r.after AND c.nth <= r.upto)`

/** Every slot of the limited topics `limited` (or of the consumer), in order: no claim of slots is under way. */
const allSlots = (claims: string, pairs: string) =>
  `FOR slot_row IN ${pairs} LOOP
  PERFORM pg_advisory_xact_lock(${slotLock(claims, "slot_row.value")}, slot_row.n);
END LOOP;`

const outboxClaim = (t: (table: string) => string) => {
  const claims = t("flow_claims")
  const slots: Slots = { claims, key: "topic", value: "limited[1]", cap: "slot_cap", held: heldById(t)("u") }
  const named = namedOpen(t, "                    ")
  return claimWithRates(t, {
    ...claimOf26(t),
    capacity: () => ({ ...capacityPerClaim(t)(), record: recordInSlots(t) }),
    declare: `${slotsDeclare}\n  slot_cap integer;`,
    unlocked: (claim, rest) =>
      `-- One topic with nothing but an in-flight limit: its claims take capacity slots (version 27), not the limits row.
limited := ARRAY(
  SELECT l.topic FROM ${t("flow_limits")} l
   WHERE ($4 IS NULL OR l.topic = ANY($4)) AND l.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
   ORDER BY l.topic);
SELECT l.max_in_flight INTO slot_cap FROM ${t("flow_limits")} l WHERE l.topic = limited[1];
-- (Rows a process of the previous release wrote to \`flow_leases\` are moved in by a claim that holds every slot.)
IF slot_cap IS NOT NULL AND ${singleTopicWhen(t)}
   AND NOT EXISTS (SELECT 1 FROM ${t("flow_leases")} f WHERE f.topic = limited[1]) THEN
${takeSlots(slots)}
  taken := 0;
  IF room > 0 THEN
    RETURN QUERY
WITH claimed (id, generation, attempt, exhausted, topic, ordering_key, payload, headers, created_at) AS (
${claim((c) => ` AND ${c}.topic = ANY(limited)`, "room")}),
${ranges},
recorded AS (
  -- A message's group, read only if the topic has an open message with one (enqueued since the
  -- claim chose this way; the claim sees it if it took it).
  INSERT INTO ${claims} (topic, group_key, slot, entries, generations, taken)
  SELECT limited[1], c.group_key, c.slot, array_agg(c.id), array_agg(c.generation), count(*)
    FROM ${
        inSlots(`,
                  CASE WHEN ${named} THEN (SELECT o.group_key FROM ${
          t("outbox")
        } o WHERE o.id = c.id::bigint) ELSE '' END
                    AS group_key`)
      } c
   GROUP BY c.group_key, c.slot)
SELECT * FROM claimed;
    GET DIAGNOSTICS taken = ROW_COUNT;
  END IF;
${rest}
  RETURN;
END IF;
`,
    afterLock: `
-- And every capacity slot of those topics, in order: no claim that took slots is under way.
${
      allSlots(
        claims,
        `SELECT l.topic AS value, s.n FROM ${t("flow_limits")} l
     CROSS JOIN LATERAL generate_series(0, ${slotCount("l.max_in_flight")} - 1) s(n)
     WHERE l.topic = ANY(limited) AND l.max_in_flight IS NOT NULL ORDER BY l.topic, s.n`
      )
    }`
  })
}

const inboxClaim = (t: (table: string) => string) => {
  const claims = t("inbox_flow_claims")
  const slots: Slots = { claims, key: "consumer", value: "$4", cap: "cap", held: inboxHeld(t) }
  return `${inboxClaimSignature(t)}
DECLARE${limitedInboxDeclare}
  rated boolean;${slotsDeclare}
BEGIN
PERFORM pg_advisory_xact_lock_shared(${limitsLock(t, CONSUMER_LIMITS)});
SELECT l.max_in_flight, l.rate_limit IS NOT NULL INTO cap, rated FROM ${t("inbox_limits")} l WHERE l.consumer = $4;
IF NOT FOUND THEN
  RETURN QUERY
${inboxClaimQuery(t)};
  RETURN;
END IF;
IF cap IS NOT NULL AND NOT rated THEN
  -- Only an in-flight limit: the claim takes capacity slots, not the limits row.
${takeSlots(slots)}
  IF room < 1 THEN
    RETURN;
  END IF;
  RETURN QUERY
${inboxClaimed(t, "room")},
${ranges},
recorded AS (
  INSERT INTO ${claims} (consumer, slot, entries, generations, taken)
  SELECT $4, c.slot, array_agg(c.id), array_agg(c.generation), count(*) FROM ${inSlots()} c GROUP BY c.slot)
SELECT * FROM claimed;
  RETURN;
END IF;
-- A rate: the consumer's limits, locked (one claim of it at a time, so no two spend a token), and every slot.
SELECT l.max_in_flight INTO cap FROM ${t("inbox_limits")} l WHERE l.consumer = $4 FOR UPDATE;
IF cap IS NOT NULL THEN
${allSlots(claims, `SELECT $4 AS value, s.n FROM generate_series(0, ${slotCount("cap")} - 1) s(n) ORDER BY s.n`)}
END IF;
${limitedInboxClaim(t)}
END
$claim$`
}

export const migration: Migration = {
  version: 27,
  name: "claims of one limited topic take capacity slots instead of turns",
  statements: (t) => [
    // The locks a new limit takes, which every claim holds shared: no claim is under way while
    // the functions change (see the header for the one that can still run the previous body).
    `SELECT pg_advisory_xact_lock(${limitsLock(t)})`,
    `SELECT pg_advisory_xact_lock(${limitsLock(t, CONSUMER_LIMITS)})`,
    `ALTER TABLE ${t("flow_claims")} ADD COLUMN slot smallint NOT NULL DEFAULT 0`,
    `ALTER TABLE ${t("inbox_flow_claims")} ADD COLUMN slot smallint NOT NULL DEFAULT 0`,
    outboxClaim(t),
    inboxClaim(t)
  ]
}
