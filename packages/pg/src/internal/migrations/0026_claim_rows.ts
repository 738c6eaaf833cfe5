/**
 * Version 26, released: never edit it (a test holds its text); add the next version instead.
 *
 * The limited outbox claim keeps what it took as one row per claim and group (`flow_claims`:
 * the messages, their claim generations, and `taken`, how many of them may still hold their
 * capacity), not one row of `flow_leases` per message. Since version 17 a claim of a limited
 * topic wrote a row per message it took and, at every claim, probed every row to drop those
 * no longer taken: a limit of 1,000,000 that could never bind cost a no-op drain as much as a
 * limit of 1,000 did, about half its rate (bench, full run of 2026-12-05: 0.54x). The stored
 * inbox's claim (version 25) keeps its capacity this way: drained in-process with a limit of
 * 1,000,000, four drains of 20,000 ran at 0.95-1.14x the rate without a limit (the bench's
 * inbox case, a limit of 2,000 and three loops of 500, measured 0.67x).
 *
 * `taken` only ever overstates: a message leaves the held state (settled, given back, cancelled,
 * its lease run out) on its own, and only a claim, which writes its own row, makes one held
 * again. So the claim sums `taken` per topic and group and counts exactly, probing each message
 * by id, only for a topic where that matters: its sum leaves less room than the claim asks for,
 * it has per-group limits (a group's count must be exact for fair share to see its room), or its
 * rows piled up past 32. A row with nothing held left is dropped then.
 *
 * The migration first takes the lock a new limit takes (every claim holds it shared), so no claim
 * of the previous version is under way while it moves `flow_leases` into `flow_claims`. Processes
 * of the previous release call this function from then on; the rows their `setLimit` still
 * writes to `flow_leases` are moved in by every claim. One window is left: a claim that called
 * the function while the migration held the lock waits, then runs the previous version's body,
 * which counts `flow_leases` only — that one claim can pass a topic's limit. Pause the limited
 * topics while this migration runs where a limit must hold through the upgrade.
 *
 * The function keeps its signature: processes of every release since version 12 call it alike.
 */
import type { Migration } from "../../Migrations.js"
import { type Capacity, type LaterClaim, limitsLock, type SingleTopicClaim } from "./0017_flow_limits.js"
import { claimWithRates } from "./0018_rate_limits.js"
import { heldById } from "./0022_prune_by_id.js"
import { claimOf24 } from "./0024_key_probe_ordered.js"
import { entriesHeld } from "./0025_inbox_limits.js"

/** The most rows of a topic before a claim counts them exactly, whatever the room. */
const MAX_CLAIM_ROWS = 32

/**
 * How many of the messages of the claim row `c` still hold their capacity: each probed by id (a
 * scalar subquery, as version 22's prune: an EXISTS was planned as a semi-join that read every
 * open message of the outbox).
 */
export const stillHeld = (t: (table: string) => string, c: string) => entriesHeld(c, heldById(t)("u"))

/** What the topic `l` (a row of `flow_limits`) may have in flight: the sum of its rows' `taken`. */
export const takenBy = (t: (table: string) => string, l: string) =>
  `coalesce((SELECT sum(c.taken) FROM ${t("flow_claims")} c WHERE c.topic = ${l}.topic), 0)`

/** Rows a process of the previous release wrote to `flow_leases` for the topics `limited`, moved in. */
const movedIn = (t: (table: string) => string) =>
  `-- Rows a process of the previous release wrote, one per message, join the count as rows of their own.
WITH moved AS (
  DELETE FROM ${t("flow_leases")} f WHERE f.topic = ANY(limited) RETURNING f.id, f.generation, f.topic, f.group_key)
INSERT INTO ${t("flow_claims")} (topic, group_key, entries, generations, taken)
SELECT m.topic, m.group_key, array_agg(m.id), array_agg(m.generation), count(*) FROM moved m GROUP BY 1, 2;`

/** This version's capacity: a row per claim and group, counted exactly where it matters. */
export const capacityPerClaim = (t: (table: string) => string) => (): Capacity => {
  const claims = t("flow_claims")
  return {
    prune: `${movedIn(t)}
-- What the claims took, at most: counted exactly, message by message, for a topic whose sum leaves
-- less room than this claim asks for, that has per-group limits, or whose rows piled up.
WITH need AS (
  SELECT l.topic FROM ${t("flow_limits")} l
   WHERE l.topic = ANY(limited) AND (
     l.max_in_flight < ${takenBy(t, "l")} + $2
     OR l.group_max_in_flight IS NOT NULL
     OR EXISTS (SELECT 1 FROM ${t("flow_group_limits")} g WHERE g.topic = l.topic AND g.max_in_flight IS NOT NULL)
     OR (SELECT count(*) FROM ${claims} c WHERE c.topic = l.topic) > ${MAX_CLAIM_ROWS})),
counted AS (
  SELECT c.id, ${stillHeld(t, "c")} AS n
    FROM ${claims} c WHERE c.topic IN (SELECT n.topic FROM need n)),
gone AS (
  DELETE FROM ${claims} c USING counted k WHERE c.id = k.id AND k.n = 0)
UPDATE ${claims} c SET taken = k.n FROM counted k WHERE c.id = k.id AND k.n > 0 AND c.taken <> k.n;`,
    busy: `SELECT c.topic, c.group_key, sum(c.taken) AS n FROM ${claims} c WHERE c.topic = ANY(limited) GROUP BY 1, 2`,
    inFlight: (l) => takenBy(t, l),
    record: `INSERT INTO ${claims} (topic, group_key, entries, generations, taken)
  SELECT l.topic, l.group_key, array_agg(l.id), array_agg(l.claim_generation + 1), count(*) FROM locked l
   GROUP BY l.topic, l.group_key`
  }
}

/**
 * That the claim's one limited topic (`limited`) has nothing but an in-flight limit: no rate, no
 * per-group limit or weight, no open message with a named group.
 */
export const singleTopicWhen = (t: (table: string) => string) =>
  `array_length(limited, 1) = 1
     AND NOT EXISTS (
       SELECT 1 FROM ${t("flow_limits")} l
        WHERE l.topic = limited[1]
          AND (l.rate_limit IS NOT NULL OR l.group_rate_limit IS NOT NULL OR l.group_max_in_flight IS NOT NULL))
     AND NOT EXISTS (SELECT 1 FROM ${t("flow_group_limits")} g WHERE g.topic = limited[1])
     AND NOT ${namedOpen(t, "       ")}`

/** That the topic `limited[1]` has an open message with a named group (`indent`: the text's, after the first line). */
export const namedOpen = (t: (table: string) => string, indent: string) =>
  `EXISTS (
${indent}SELECT 1 FROM ${t("outbox")} o
${indent} WHERE o.topic = limited[1] AND o.group_key > '' AND o.projected_at IS NULL AND o.dead_at IS NULL)`

/**
 * The claim of one limited topic with nothing but an in-flight limit: no rate, no per-group
 * limit or weight, no open message with a named group. With one group there is nothing for fair
 * share to choose, so the claim is the claim of topics without limits — keyed runs included —
 * narrowed to the topic and to what its limit leaves, and records what it took. (A message with a
 * named group enqueued while it runs is recorded under its group; the next claim sees the group
 * and takes the long way.) The long way cost a no-op claim of 500 about 13 ms where this takes
 * about what an unlimited claim takes (7.4 ms, `EXPLAIN ANALYZE` of the function).
 */
const singleTopic = (t: (table: string) => string) =>
(
  claim: (also: (c: string) => string, limit: string) => string
): SingleTopicClaim => ({
  declare: "\n  single_free integer;",
  when: singleTopicWhen(t),
  statements: `    SELECT CASE WHEN l.max_in_flight IS NULL THEN $2
                ELSE least($2, greatest(l.max_in_flight - ${takenBy(t, "l")}, 0))::integer END
      INTO single_free FROM ${t("flow_limits")} l WHERE l.topic = limited[1];
    RETURN QUERY
WITH claimed (id, generation, attempt, exhausted, topic, ordering_key, payload, headers, created_at) AS (
${claim((c) => ` AND ${c}.topic = ANY(limited)`, "single_free")}),
recorded AS (
  INSERT INTO ${t("flow_claims")} (topic, group_key, entries, generations, taken)
  SELECT o.topic, o.group_key, array_agg(o.id), array_agg(c.generation::bigint), count(*)
    FROM claimed c JOIN ${t("outbox")} o ON o.id = c.id::bigint
   WHERE NOT c.exhausted
   GROUP BY o.topic, o.group_key)
SELECT * FROM claimed;`
})

/** What the claim changes up to this version. */
export const claimOf26 = (t: (table: string) => string): LaterClaim => ({
  ...claimOf24(t),
  capacity: capacityPerClaim(t),
  single: singleTopic(t)
})

export const migration: Migration = {
  version: 26,
  name: "the limited claim keeps a row per claim, not per message",
  statements: (t) => [
    `SELECT pg_advisory_xact_lock(${limitsLock(t)})`,
    `CREATE TABLE ${t("flow_claims")} (
        id bigserial PRIMARY KEY,
        topic text NOT NULL,
        group_key text NOT NULL,
        entries bigint[] NOT NULL,
        generations bigint[] NOT NULL,
        taken integer NOT NULL CHECK (taken > 0)
      )`,
    `CREATE INDEX flow_claims_topic_idx ON ${t("flow_claims")} (topic, group_key)`,
    // What is in flight now, moved over: one row per topic and group.
    `WITH moved AS (DELETE FROM ${t("flow_leases")} f RETURNING f.id, f.generation, f.topic, f.group_key)
     INSERT INTO ${t("flow_claims")} (topic, group_key, entries, generations, taken)
     SELECT m.topic, m.group_key, array_agg(m.id), array_agg(m.generation), count(*) FROM moved m GROUP BY 1, 2`,
    claimWithRates(t, claimOf26(t))
  ]
}
