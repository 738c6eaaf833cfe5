/**
 * The outbox's open claim: ready messages in due order, a key's run behind its head, a lease run
 * out too often sent to the dead letters. Every other path of the outbox claim calls it for what
 * it takes the open way; `explainClaim` explains its query.
 */
import type { Tables } from "../flow/limits.js"
import { takeOrBury } from "./takeOrBury.js"

export const outboxClaimOpen = (t: Tables) =>
  `CREATE FUNCTION ${t("outbox_claim_open")}(text, integer, double precision, text[], integer, integer, boolean)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    topic text, ordering_key text, payload jsonb, headers jsonb, created_at text, group_key text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
  SET enable_sort = off
  SET jit = off
AS $claim$
#variable_conflict use_column
-- $1 worker, $2 the most messages to take, $3 lease in seconds, $4 topics (NULL: all), $5 the most
-- leases a message may lose, $6 the most messages of one key, $7 whether the topics asked may have
-- limits (a limited claim that holds their limits or slots); without it, topics with limits are
-- left to their own claims. Each row comes back with its group, which a limited claim records.
--
-- Sorts and JIT are off: the ordered reads must be index scans whatever the statistics say.
-- Under a generic plan the planner guesses a few hundred ready rows where there are 500,000 and,
-- once due times stop following the heap's order (waits mixed in), it would read them all and
-- sort them, every claim. A sort of the claim's own few rows, which nothing else gives, is still
-- made; sorts off cost a plan 10^10, which would have JIT compile every claim.
--
-- Keyed runs: with a key's head come the messages of that key right behind it ($6 each), so one
-- claim delivers a key's backlog in order. A run is a prefix of the key's open messages: it stops
-- at the first one that is not ready (delayed, held by a live lease, of a topic this claim does
-- not take, paused) or that another transaction holds locked, and the limit cuts runs
-- breadth-first (every head, then every second message, ...), so no message is handed out
-- without every open message of its key before it in the same claim. Runs are cut to the limit
-- before they are locked. Only the holder of a key's head can take what follows it: every claim
-- refuses a keyed row with an open row of its key before it unless that row is its own run's,
-- and the head is locked (FOR UPDATE SKIP LOCKED) by the claim that takes it, so two claims never
-- split a key. Every step over the claim's own rows is an array probe, a hashed anti-join or a
-- join with the (materialized, usually empty) gaps: never a join of two CTEs of the claim's size,
-- nor a scan of one per row (a generic plan estimates one row each and nests the loops: 4.5 s and
-- 0.5 s for a claim in the first two versions of this query).
BEGIN
RETURN QUERY
WITH heads AS (
  -- Ready messages, earliest due first (ties: id); a keyed one only as its key's head.
  SELECT c.id, c.ordering_key FROM ${t("outbox")} c
   WHERE c.projected_at IS NULL AND c.dead_at IS NULL
     AND c.available_at <= now() AND (c.claimed_until IS NULL OR c.claimed_until <= now())
     AND ($4 IS NULL OR c.topic = ANY($4)) AND c.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
     AND ($7 OR c.topic <> ALL(ARRAY(SELECT l.topic FROM ${t("flow_limits")} l)))
     AND (c.ordering_key IS NULL OR (
       -- A keyed head only among the first 1,000 ready messages: the probes of the key index stay
       -- bounded however large a blocked backlog grows. In due order a key's later message can be
       -- due before its head (two enqueues of a key racing, a redrive keeping its old due time),
       -- and a thousand such would fill the window for good: one claim in 16 (an InitPlan, once
       -- per claim) looks past it, so a head stuck behind it is reached within a few claims.
       ((SELECT random()) < 0.0625 OR (c.due_at, c.id) <= (SELECT w.due_at, w.id FROM (
         SELECT w.due_at, w.id FROM ${t("outbox")} w
          WHERE w.projected_at IS NULL AND w.dead_at IS NULL
            AND w.available_at <= now() AND (w.claimed_until IS NULL OR w.claimed_until <= now())
            AND ($4 IS NULL OR w.topic = ANY($4)) AND w.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
            AND ($7 OR w.topic <> ALL(ARRAY(SELECT l.topic FROM ${t("flow_limits")} l)))
          ORDER BY w.due_at, w.id LIMIT 1000) w ORDER BY w.due_at DESC, w.id DESC LIMIT 1))
       -- No open message of its key before it: the first one in the key index's order, which only
       -- that index gives (a NOT EXISTS was answered through the group index, filtering other
       -- keys' messages: 24 rows per probe, 60 of 85 ms in a claim of 500 over 10,000 keyed).
       AND NOT coalesce((
         SELECT true FROM ${t("outbox")} e
          WHERE e.ordering_key = c.ordering_key AND e.ordering_key IS NOT NULL AND e.id < c.id
            AND e.projected_at IS NULL AND e.dead_at IS NULL
          ORDER BY e.ordering_key, e.id LIMIT 1), false)))
   ORDER BY c.due_at, c.id
   LIMIT $2
   FOR UPDATE SKIP LOCKED),
behind AS (
  -- The open messages of each keyed head's key behind it, whether each is ready.
  SELECT h.id AS head, f.id, f.ready,
         row_number() OVER (PARTITION BY h.id ORDER BY f.id) AS position
    FROM heads h
   CROSS JOIN LATERAL (
     SELECT n.id,
            (n.available_at <= now() AND (n.claimed_until IS NULL OR n.claimed_until <= now())
             AND ($4 IS NULL OR n.topic = ANY($4))
             AND n.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
             AND ($7 OR n.topic <> ALL(ARRAY(SELECT l.topic FROM ${t("flow_limits")} l)))) AS ready
       FROM ${t("outbox")} n
      WHERE n.ordering_key = h.ordering_key AND n.id > h.id AND n.projected_at IS NULL AND n.dead_at IS NULL
      ORDER BY n.id
      LIMIT least($6 - 1, $2 - (SELECT count(*) FROM heads))) f
   WHERE h.ordering_key IS NOT NULL AND $6 > 1),
reachable AS (
  -- A run ends at its first message that is not ready.
  SELECT b.head, b.id, b.position FROM (
    SELECT b.head, b.id, b.position, bool_and(b.ready) OVER (PARTITION BY b.head ORDER BY b.position) AS reachable
      FROM behind b) b
   WHERE b.reachable),
picked AS (
  -- Cut to the limit breadth-first: every head, then every second message, ...
  SELECT a.head, a.id, a.position FROM (
    SELECT h.id AS head, h.id, 0::bigint AS position FROM heads h
    UNION ALL
    SELECT r.head, r.id, r.position FROM reachable r) a
   ORDER BY a.position, a.id
   LIMIT $2),
locked AS (
  SELECT q.id FROM ${t("outbox")} q
   WHERE q.id = ANY(ARRAY(SELECT p.id FROM picked p WHERE p.position > 0)) AND q.projected_at IS NULL AND q.dead_at IS NULL
   FOR UPDATE SKIP LOCKED),
gaps AS MATERIALIZED (
  -- A run also ends at its first message another transaction holds locked.
  SELECT p.head, min(p.position) AS position FROM picked p
   WHERE p.position > 0 AND p.id NOT IN (SELECT l.id FROM locked l)
   GROUP BY p.head),
chosen AS (
  SELECT p.id, p.position FROM picked p LEFT JOIN gaps g ON g.head = p.head
   WHERE p.position = 0 OR g.position IS NULL OR p.position < g.position),
-- A head whose lease ran out unsettled counts one more lost lease — the rest of a run was never
-- started while an earlier message of its key was unsettled: see takeOrBury.
${
    takeOrBury(t, {
      heads: "ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)",
      all: "ARRAY(SELECT c.id FROM chosen c)"
    })
  }
END
$claim$`
