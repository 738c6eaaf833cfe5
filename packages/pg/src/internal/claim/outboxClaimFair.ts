/**
 * Fair share of limited topics, one statement: what the in-flight limits and token buckets leave,
 * group by group, ranked by start-time fair queueing, recorded under the topics' capacity slots.
 * Called by the long way (`outbox_claim_limited`) once it holds the limits rows and every slot.
 */
import { takenBy } from "../flow/capacity.js"
import { type Tables, TOPIC_LIMITS } from "../flow/limits.js"
import { bucket, groupRateColumns, ownRate } from "../flow/rates.js"
import { takeOrBury } from "./takeOrBury.js"

export const outboxClaimFair = (t: Tables) =>
  `CREATE FUNCTION ${t("outbox_claim_fair")}(text, integer, double precision, text[], integer, integer,
    limited text[], clk timestamptz)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    topic text, ordering_key text, payload jsonb, headers jsonb, created_at text, group_key text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
  SET enable_sort = off
  SET jit = off
  SET enable_bitmapscan = off
AS $claim$
#variable_conflict use_column
-- The claim's arguments ($1-$6, as outbox_claim's), the limited topics whose limits rows and slots
-- the caller holds, and the buckets' clock it read after taking them.
--
-- Each group with ready messages offers its first ones (a key's head only, in due order), ranked
-- by start-time fair queueing: a group's virtual time (what it was served, over its weight) plus
-- its position over its weight, so the least served group goes first and a group with a large
-- backlog does not hold up one with a few (work-conserving weighted round robin, kept across
-- claims). Each group's messages are read in index order until its few are found: a bitmap scan
-- would read a group's whole backlog and sort it (bitmap scans are off: the plan is made once,
-- under this setting). Its shapes hold whatever the statistics say: named groups through the group
-- index (the partial index's condition is written out), rows updated by primary key (a plan seen on
-- a table not analyzed yet scanned every open message to join a handful).
BEGIN
RETURN QUERY
WITH RECURSIVE
lim AS (
  SELECT l.topic, l.max_in_flight, l.group_max_in_flight,
         ${bucket(t, "l", ownRate, "clk")} AS tokens,
         l.group_rate_limit, l.group_rate_period, l.group_rate_burst
    FROM ${t("flow_limits")} l WHERE l.topic = ANY(limited)),
busy AS (
  SELECT c.topic, c.group_key, sum(c.taken) AS n FROM ${t("flow_claims")} c WHERE c.topic = ANY(limited) GROUP BY 1, 2),
topic_free AS (
  SELECT l.topic, least(CASE WHEN l.max_in_flight IS NULL THEN $2
    ELSE greatest(l.max_in_flight - coalesce((SELECT sum(b.n) FROM busy b WHERE b.topic = l.topic), 0), 0)::integer END, floor(l.tokens)::integer) AS free
    FROM lim l),
named AS (
  -- The topics' named groups, a skip scan of the group index from \`group_key > ''\` ('' sorts before
  -- every other text): the messages without a group are skipped in one descent (\`<> ''\` read them
  -- all, 16.8 ms of a 121 ms claim with 20,000 open).
  (SELECT o.topic, o.group_key FROM ${t("outbox")} o
    WHERE o.topic = ANY(limited) AND o.group_key > '' AND o.projected_at IS NULL AND o.dead_at IS NULL
    ORDER BY o.topic, o.group_key LIMIT 1)
  UNION ALL
  SELECT n.topic, n.group_key FROM named g CROSS JOIN LATERAL (
    SELECT o.topic, o.group_key FROM ${t("outbox")} o
     WHERE o.topic = ANY(limited) AND o.group_key > '' AND o.projected_at IS NULL AND o.dead_at IS NULL AND (o.topic, o.group_key) > (g.topic, g.group_key)
     ORDER BY o.topic, o.group_key LIMIT 1) n),
grouped AS (
  SELECT g.topic, g.group_key FROM named g
  UNION ALL
  SELECT l.topic, '' FROM lim l),
quota AS (
  SELECT g.topic, g.group_key, s.vtime, coalesce(o.weight, 1) AS weight, g.tokens,
         least(tf.free, $2, CASE WHEN g.cap IS NULL THEN $2 ELSE greatest(g.cap - coalesce(b.n, 0), 0)::integer END, floor(g.tokens)::integer) AS free
    FROM (
      -- A group's own limit, else the topic's per-group one (messages without a group: none), and
      -- its bucket at its rate: its own where it has one, else the topic's per-group rate.
      SELECT g.topic, g.group_key, coalesce(o.max_in_flight, CASE WHEN g.group_key <> '' THEN l.group_max_in_flight END) AS cap,
             ${bucket(t, "u", (c) => `r.rate_${c}`, "clk")} AS tokens
        FROM grouped g JOIN lim l ON l.topic = g.topic
        LEFT JOIN ${t("flow_group_limits")} o ON o.topic = g.topic AND o.group_key = g.group_key
        LEFT JOIN ${t("flow_group_buckets")} u ON u.topic = g.topic AND u.group_key = g.group_key
       CROSS JOIN LATERAL (
         SELECT ${groupRateColumns("o", "l", "g", "                ")}) r) g
    JOIN topic_free tf ON tf.topic = g.topic
    LEFT JOIN busy b ON b.topic = g.topic AND b.group_key = g.group_key
    LEFT JOIN ${t("flow_group_limits")} o ON o.topic = g.topic AND o.group_key = g.group_key
    LEFT JOIN ${t("flow_group_state")} s ON s.topic = g.topic AND s.group_key = g.group_key),
candidates AS (
  -- Each group's first ready messages, in due order through the group index.
  SELECT c.id, c.topic, c.generation, q.group_key, q.vtime, q.weight,
         row_number() OVER (PARTITION BY q.topic, q.group_key ORDER BY c.due_at, c.id) AS nth
    FROM quota q CROSS JOIN LATERAL (
      SELECT c.id, c.topic, c.claim_generation AS generation, c.due_at FROM ${t("outbox")} c
       WHERE c.topic = q.topic AND c.group_key = q.group_key AND c.projected_at IS NULL AND c.dead_at IS NULL
         AND c.available_at <= now() AND (c.claimed_until IS NULL OR c.claimed_until <= now())
         AND ($4 IS NULL OR c.topic = ANY($4)) AND c.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
         AND (c.ordering_key IS NULL OR NOT coalesce((
           SELECT true FROM ${t("outbox")} e
            WHERE e.ordering_key = c.ordering_key AND e.ordering_key IS NOT NULL AND e.id < c.id
              AND e.projected_at IS NULL AND e.dead_at IS NULL
            ORDER BY e.ordering_key, e.id LIMIT 1), false))
       ORDER BY c.topic, c.group_key, c.due_at, c.id LIMIT q.free) c
   WHERE q.free > 0),
clock AS (
  -- The topic's virtual time: the least served of the groups with messages to offer, never
  -- behind where it was. A group new or back from idle starts there (no credit saved up while
  -- it had nothing to do).
  SELECT c.topic, greatest(min(coalesce(c.vtime, l.vclock)), min(l.vclock)) AS now
    FROM candidates c JOIN ${t("flow_limits")} l ON l.topic = c.topic GROUP BY c.topic),
started AS (
  SELECT c.*, greatest(coalesce(c.vtime, k.now), k.now) AS start
    FROM candidates c JOIN clock k ON k.topic = c.topic),
offered AS (
  SELECT c.id, c.topic, c.generation, c.group_key, c.start, c.start + c.nth::float8 / c.weight AS rank FROM started c),
fitting AS (
  SELECT o.id, o.topic, o.generation, o.group_key FROM (
    SELECT o.*, row_number() OVER (PARTITION BY o.topic ORDER BY o.rank, o.id) AS nth FROM offered o) o
    JOIN topic_free tf ON tf.topic = o.topic
   WHERE o.nth <= tf.free
   ORDER BY o.rank, o.id
   LIMIT $2),
locked AS (
  SELECT q.id, q.topic, q.group_key, q.claim_generation FROM ${t("outbox")} q
   WHERE q.id = ANY(ARRAY(SELECT f.id FROM fitting f)) AND q.projected_at IS NULL AND q.dead_at IS NULL
   FOR UPDATE SKIP LOCKED),
leased AS (
  -- What it took, recorded under the slots: each topic's messages in id order fill its slots'
  -- rooms, slot by slot; only what passes them all (there was an excess already) goes to slot 0.
  -- Recorded all in slot 0, it would cost the slots up to (slots - 1) times as much room until it
  -- settled.
  INSERT INTO ${t("flow_claims")} (topic, group_key, slot, entries, generations, taken)
  SELECT l.topic, l.group_key, coalesce(r.slot, 0), array_agg(l.id), array_agg(l.claim_generation + 1), count(*)
    FROM (SELECT l.*, row_number() OVER (PARTITION BY l.topic ORDER BY l.id) AS nth FROM locked l) l
    LEFT JOIN (
      SELECT r.topic, r.slot, sum(r.room) OVER w - r.room AS after, sum(r.room) OVER w AS upto
        FROM (
          SELECT f.topic, s.n AS slot, greatest(${t("flow_slot_share")}(f.max_in_flight, s.n)
                          - ${takenBy(t, TOPIC_LIMITS, "f.topic", "s.n")}, 0) AS room
            FROM ${t("flow_limits")} f
           CROSS JOIN LATERAL generate_series(0, ${t("flow_slots")}(f.max_in_flight) - 1) s(n)
           WHERE f.topic = ANY(limited) AND f.max_in_flight IS NOT NULL) r
      WINDOW w AS (PARTITION BY r.topic ORDER BY r.slot)) r
      ON r.topic = l.topic AND l.nth > r.after AND l.nth <= r.upto
   GROUP BY l.topic, l.group_key, coalesce(r.slot, 0)),
served AS (
  -- Each group that offered keeps its place; one served moves on by what it took over its weight.
  INSERT INTO ${t("flow_group_state")} (topic, group_key, vtime)
  SELECT o.topic, o.group_key,
         greatest(min(o.start), max(o.rank) FILTER (WHERE o.id IN (SELECT l.id FROM locked l)))
    FROM offered o GROUP BY 1, 2
  ON CONFLICT (topic, group_key) DO UPDATE SET vtime = excluded.vtime),
spent AS (
  -- Each group with a rate spends a token per message taken.
  INSERT INTO ${t("flow_group_buckets")} (topic, group_key, tokens, tokens_at)
  SELECT q.topic, q.group_key, q.tokens - count(*), clk
    FROM locked k JOIN quota q ON q.topic = k.topic AND q.group_key = k.group_key
   WHERE q.tokens IS NOT NULL
   GROUP BY q.topic, q.group_key, q.tokens
  ON CONFLICT (topic, group_key) DO UPDATE SET tokens = excluded.tokens, tokens_at = excluded.tokens_at),
ticked AS (
  -- The topic's virtual time moves on; a topic with a rate spends a token per message taken.
  UPDATE ${t("flow_limits")} l
     SET vclock = greatest(l.vclock, coalesce(k.now, l.vclock)),
         tokens = CASE WHEN m.tokens IS NULL THEN l.tokens ELSE m.tokens - coalesce(s.n, 0) END,
         tokens_at = CASE WHEN m.tokens IS NULL THEN l.tokens_at ELSE clk END
    FROM lim m
    LEFT JOIN clock k ON k.topic = m.topic
    LEFT JOIN (SELECT x.topic, count(*) AS n FROM locked x GROUP BY x.topic) s ON s.topic = m.topic
   WHERE l.topic = m.topic AND (l.vclock < k.now OR s.n > 0)),
-- Heads only (every row this claim locked is a head): see takeOrBury.
${takeOrBury(t, { heads: "ARRAY(SELECT l.id FROM locked l)", all: "ARRAY(SELECT l.id FROM locked l)" })}
END
$claim$`
