// TEMPORARY (branch core-baseline): the live claim functions as emitted by the pre-release
// migrations, until the readable claim room replaces them.
/* eslint-disable max-lines */
import type { Tables } from "../flow/limits.js"

export const claimFunctions = (t: Tables): ReadonlyArray<string> => [
  `CREATE OR REPLACE FUNCTION ${t("outbox_claim")}(text, integer, double precision, text[], integer, integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    topic text, ordering_key text, payload jsonb, headers jsonb, created_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
  SET enable_sort = off
  SET jit = off
AS $claim$
#variable_conflict use_column
DECLARE
  limited text[];
  taken integer;
  clk timestamptz;
  single_free integer;
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
  slot_still integer;
  slot_cap integer;
BEGIN
PERFORM pg_advisory_xact_lock_shared('${t("flow_limits")}'::regclass::oid::integer, 17);
IF NOT EXISTS (SELECT 1 FROM ${t("flow_limits")} l WHERE $4 IS NULL OR l.topic = ANY($4)) THEN
  RETURN QUERY
WITH heads AS (
  SELECT c.id, c.ordering_key FROM ${t("outbox")} c
   WHERE c.projected_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now() AND (c.claimed_until IS NULL OR c.claimed_until <= now()) AND ($4 IS NULL OR c.topic = ANY($4)) AND c.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
     AND (c.ordering_key IS NULL OR (
       ((SELECT random()) < 0.0625 OR (c.due_at, c.id) <= (SELECT w.due_at, w.id FROM (
         SELECT w.due_at, w.id FROM ${t("outbox")} w WHERE w.projected_at IS NULL AND w.dead_at IS NULL AND w.available_at <= now() AND (w.claimed_until IS NULL OR w.claimed_until <= now()) AND ($4 IS NULL OR w.topic = ANY($4)) AND w.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) ORDER BY w.due_at, w.id LIMIT 1000) w ORDER BY w.due_at DESC, w.id DESC LIMIT 1))
       AND NOT coalesce((
         SELECT true FROM ${t("outbox")} e
          WHERE e.ordering_key = c.ordering_key AND e.ordering_key IS NOT NULL AND e.id < c.id AND e.projected_at IS NULL AND e.dead_at IS NULL
          ORDER BY e.ordering_key, e.id LIMIT 1), false)))
   ORDER BY c.due_at, c.id
   LIMIT $2
   FOR UPDATE SKIP LOCKED),
behind AS (
  SELECT h.id AS head, f.id, f.ready,
         row_number() OVER (PARTITION BY h.id ORDER BY f.id) AS position
    FROM heads h
   CROSS JOIN LATERAL (
     SELECT n.id, (n.available_at <= now() AND (n.claimed_until IS NULL OR n.claimed_until <= now()) AND ($4 IS NULL OR n.topic = ANY($4)) AND n.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))) AS ready FROM ${t("outbox")} n
      WHERE n.ordering_key = h.ordering_key AND n.id > h.id AND n.projected_at IS NULL AND n.dead_at IS NULL
      ORDER BY n.id
      LIMIT least($6 - 1, $2 - (SELECT count(*) FROM heads))) f
   WHERE h.ordering_key IS NOT NULL AND $6 > 1),
reachable AS (
  SELECT b.head, b.id, b.position FROM (
    SELECT b.head, b.id, b.position, bool_and(b.ready) OVER (PARTITION BY b.head ORDER BY b.position) AS reachable
      FROM behind b) b
   WHERE b.reachable),
picked AS (
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
  SELECT p.head, min(p.position) AS position FROM picked p
   WHERE p.position > 0 AND p.id NOT IN (SELECT l.id FROM locked l)
   GROUP BY p.head),
chosen AS (
  SELECT p.id, p.position FROM picked p LEFT JOIN gaps g ON g.head = p.head
   WHERE p.position = 0 OR g.position IS NULL OR p.position < g.position)
UPDATE ${t("outbox")} q SET
  claimed_by = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.attempt_count ELSE q.attempt_count + 1 END,
  lease_expiries = q.lease_expiries + CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 THEN 1 ELSE 0 END,
  dead_at = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN now() END,
  last_error = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5
    THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT c.id FROM chosen c)) AND q.projected_at IS NULL AND q.dead_at IS NULL
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL,
  q.topic, q.ordering_key, q.payload, q.headers, to_char(q.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
  RETURN;
END IF;
-- One topic with nothing but an in-flight limit: its claims take capacity slots (version 27), not the limits row.
limited := ARRAY(
  SELECT l.topic FROM ${t("flow_limits")} l
   WHERE ($4 IS NULL OR l.topic = ANY($4)) AND l.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
   ORDER BY l.topic);
SELECT l.max_in_flight INTO slot_cap FROM ${t("flow_limits")} l WHERE l.topic = limited[1];
-- (Rows a process of the previous release wrote to \`flow_leases\` are moved in by a claim that holds every slot.)
IF slot_cap IS NOT NULL AND array_length(limited, 1) = 1
     AND NOT EXISTS (
       SELECT 1 FROM ${t("flow_limits")} l
        WHERE l.topic = limited[1]
          AND (l.rate_limit IS NOT NULL OR l.group_rate_limit IS NOT NULL OR l.group_max_in_flight IS NOT NULL))
     AND NOT EXISTS (SELECT 1 FROM ${t("flow_group_limits")} g WHERE g.topic = limited[1])
     AND NOT EXISTS (
       SELECT 1 FROM ${t("outbox")} o
        WHERE o.topic = limited[1] AND o.group_key > '' AND o.projected_at IS NULL AND o.dead_at IS NULL)
   AND NOT EXISTS (SELECT 1 FROM ${t("flow_leases")} f WHERE f.topic = limited[1]) THEN
slot_count := least(8, greatest(1, slot_cap / 16));
-- The slots, those that seem to leave the most first (as committed now; each is counted once held).
slot_order := ARRAY(
  SELECT s.n FROM generate_series(0, slot_count - 1) s(n)
   ORDER BY coalesce((SELECT sum(c.taken) FROM ${t("flow_claims")} c WHERE c.topic = limited[1] AND c.slot = s.n), 0)
            - (CASE WHEN s.n < slot_count THEN slot_cap / slot_count + CASE WHEN s.n < slot_cap % slot_count THEN 1 ELSE 0 END ELSE 0 END), random());
held_slots := '{}';
slot_rooms := '{}';
room := 0;
-- Two rounds over the slots, each taken only if no claim holds it; if the first round took none,
-- the second begins by waiting for the slot that seemed to leave the most.
FOR slot_i IN 1 .. 2 * slot_count LOOP
  slot_no := slot_order[1 + (slot_i - 1) % slot_count];
  CONTINUE WHEN slot_no = ANY(held_slots);
  IF slot_i = slot_count + 1 AND cardinality(held_slots) = 0 THEN
    PERFORM pg_advisory_xact_lock(hashtext('${t("flow_claims")}:' || limited[1]), slot_no);
  ELSE
    CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtext('${t("flow_claims")}:' || limited[1]), slot_no);
  END IF;
  -- A new snapshot from here on: every claim that held this slot before has committed.
  IF cardinality(held_slots) = 0 THEN
    -- No claim of the other way runs while a slot is held: what is over the shares now can only shrink.
    slot_overflow := (SELECT coalesce(sum(greatest(o.n - (CASE WHEN o.slot < slot_count THEN slot_cap / slot_count + CASE WHEN o.slot < slot_cap % slot_count THEN 1 ELSE 0 END ELSE 0 END), 0)), 0) FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("flow_claims")} c WHERE c.topic = limited[1] GROUP BY c.slot) o);
    IF slot_overflow > 0 THEN
      -- Rows written past a slot's share (by a claim that held every slot, a new limit): counted exactly.
      FOR slot_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${t("flow_claims")} c
     WHERE c.topic = limited[1] AND c.slot IN (SELECT o.slot FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("flow_claims")} c WHERE c.topic = limited[1] GROUP BY c.slot) o WHERE o.n > (CASE WHEN o.slot < slot_count THEN slot_cap / slot_count + CASE WHEN o.slot < slot_cap % slot_count THEN 1 ELSE 0 END ELSE 0 END)) ORDER BY c.id FOR UPDATE SKIP LOCKED LOOP
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
      slot_overflow := (SELECT coalesce(sum(greatest(o.n - (CASE WHEN o.slot < slot_count THEN slot_cap / slot_count + CASE WHEN o.slot < slot_cap % slot_count THEN 1 ELSE 0 END ELSE 0 END), 0)), 0) FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("flow_claims")} c WHERE c.topic = limited[1] GROUP BY c.slot) o);
    END IF;
  END IF;
  held_slots := held_slots || slot_no;
  SELECT coalesce(sum(c.taken), 0), count(*) INTO slot_taken, slot_rows
    FROM ${t("flow_claims")} c WHERE c.topic = limited[1] AND c.slot = slot_no;
  -- Counted exactly, oldest claim first (the likeliest settled), only where the sum of \`taken\`
  -- leaves less than the claim could use of this slot, or the rows piled up.
  IF (CASE WHEN slot_no < slot_count THEN slot_cap / slot_count + CASE WHEN slot_no < slot_cap % slot_count THEN 1 ELSE 0 END ELSE 0 END) - slot_taken - slot_overflow < least($2 - room, (CASE WHEN slot_no < slot_count THEN slot_cap / slot_count + CASE WHEN slot_no < slot_cap % slot_count THEN 1 ELSE 0 END ELSE 0 END)) OR slot_rows > 32 THEN
    FOR slot_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${t("flow_claims")} c
     WHERE c.topic = limited[1] AND c.slot = slot_no ORDER BY c.id FOR UPDATE SKIP LOCKED LOOP
      EXIT WHEN (CASE WHEN slot_no < slot_count THEN slot_cap / slot_count + CASE WHEN slot_no < slot_cap % slot_count THEN 1 ELSE 0 END ELSE 0 END) - slot_taken - slot_overflow >= least($2 - room, (CASE WHEN slot_no < slot_count THEN slot_cap / slot_count + CASE WHEN slot_no < slot_cap % slot_count THEN 1 ELSE 0 END ELSE 0 END)) AND slot_rows <= 32;
      slot_still := (SELECT count(*) FROM unnest(slot_row.entries, slot_row.generations) u(id, generation) WHERE coalesce((
   SELECT true FROM ${t("outbox")} o
    WHERE o.id = u.id AND o.claim_generation = u.generation AND o.projected_at IS NULL AND o.dead_at IS NULL
      AND o.claimed_until > now()), false));
      IF slot_still = 0 THEN
        DELETE FROM ${t("flow_claims")} c WHERE c.id = slot_row.id;
      ELSIF slot_still < slot_row.taken THEN
        UPDATE ${t("flow_claims")} c SET taken = slot_still WHERE c.id = slot_row.id;
      END IF;
      IF slot_still = 0 THEN
        slot_rows := slot_rows - 1;
      END IF;
      slot_taken := slot_taken - slot_row.taken + slot_still;
    END LOOP;
  END IF;
  slot_rooms := slot_rooms || greatest(least((CASE WHEN slot_no < slot_count THEN slot_cap / slot_count + CASE WHEN slot_no < slot_cap % slot_count THEN 1 ELSE 0 END ELSE 0 END) - slot_taken - slot_overflow, $2 - room), 0)::integer;
  room := room + slot_rooms[cardinality(slot_rooms)];
  EXIT WHEN room >= $2;
END LOOP;
  taken := 0;
  IF room > 0 THEN
    RETURN QUERY
WITH claimed (id, generation, attempt, exhausted, topic, ordering_key, payload, headers, created_at) AS (
WITH heads AS (
  SELECT c.id, c.ordering_key FROM ${t("outbox")} c
   WHERE c.projected_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now() AND (c.claimed_until IS NULL OR c.claimed_until <= now()) AND ($4 IS NULL OR c.topic = ANY($4)) AND c.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND c.topic = ANY(limited)
     AND (c.ordering_key IS NULL OR (
       ((SELECT random()) < 0.0625 OR (c.due_at, c.id) <= (SELECT w.due_at, w.id FROM (
         SELECT w.due_at, w.id FROM ${t("outbox")} w WHERE w.projected_at IS NULL AND w.dead_at IS NULL AND w.available_at <= now() AND (w.claimed_until IS NULL OR w.claimed_until <= now()) AND ($4 IS NULL OR w.topic = ANY($4)) AND w.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND w.topic = ANY(limited) ORDER BY w.due_at, w.id LIMIT 1000) w ORDER BY w.due_at DESC, w.id DESC LIMIT 1))
       AND NOT coalesce((
         SELECT true FROM ${t("outbox")} e
          WHERE e.ordering_key = c.ordering_key AND e.ordering_key IS NOT NULL AND e.id < c.id AND e.projected_at IS NULL AND e.dead_at IS NULL
          ORDER BY e.ordering_key, e.id LIMIT 1), false)))
   ORDER BY c.due_at, c.id
   LIMIT room
   FOR UPDATE SKIP LOCKED),
behind AS (
  SELECT h.id AS head, f.id, f.ready,
         row_number() OVER (PARTITION BY h.id ORDER BY f.id) AS position
    FROM heads h
   CROSS JOIN LATERAL (
     SELECT n.id, (n.available_at <= now() AND (n.claimed_until IS NULL OR n.claimed_until <= now()) AND ($4 IS NULL OR n.topic = ANY($4)) AND n.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND n.topic = ANY(limited)) AS ready FROM ${t("outbox")} n
      WHERE n.ordering_key = h.ordering_key AND n.id > h.id AND n.projected_at IS NULL AND n.dead_at IS NULL
      ORDER BY n.id
      LIMIT least($6 - 1, room - (SELECT count(*) FROM heads))) f
   WHERE h.ordering_key IS NOT NULL AND $6 > 1),
reachable AS (
  SELECT b.head, b.id, b.position FROM (
    SELECT b.head, b.id, b.position, bool_and(b.ready) OVER (PARTITION BY b.head ORDER BY b.position) AS reachable
      FROM behind b) b
   WHERE b.reachable),
picked AS (
  SELECT a.head, a.id, a.position FROM (
    SELECT h.id AS head, h.id, 0::bigint AS position FROM heads h
    UNION ALL
    SELECT r.head, r.id, r.position FROM reachable r) a
   ORDER BY a.position, a.id
   LIMIT room),
locked AS (
  SELECT q.id FROM ${t("outbox")} q
   WHERE q.id = ANY(ARRAY(SELECT p.id FROM picked p WHERE p.position > 0)) AND q.projected_at IS NULL AND q.dead_at IS NULL
   FOR UPDATE SKIP LOCKED),
gaps AS MATERIALIZED (
  SELECT p.head, min(p.position) AS position FROM picked p
   WHERE p.position > 0 AND p.id NOT IN (SELECT l.id FROM locked l)
   GROUP BY p.head),
chosen AS (
  SELECT p.id, p.position FROM picked p LEFT JOIN gaps g ON g.head = p.head
   WHERE p.position = 0 OR g.position IS NULL OR p.position < g.position)
UPDATE ${t("outbox")} q SET
  claimed_by = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.attempt_count ELSE q.attempt_count + 1 END,
  lease_expiries = q.lease_expiries + CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 THEN 1 ELSE 0 END,
  dead_at = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN now() END,
  last_error = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5
    THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT c.id FROM chosen c)) AND q.projected_at IS NULL AND q.dead_at IS NULL
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL,
  q.topic, q.ordering_key, q.payload, q.headers, to_char(q.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
ranges AS MATERIALIZED (
  SELECT h.slot, sum(h.room) OVER (ORDER BY h.nth) - h.room AS after, sum(h.room) OVER (ORDER BY h.nth) AS upto
    FROM unnest(held_slots, slot_rooms) WITH ORDINALITY h(slot, room, nth)),
recorded AS (
  -- A message's group, read only if the topic has an open message with one (enqueued since the
  -- claim chose this way; the claim sees it if it took it).
  INSERT INTO ${t("flow_claims")} (topic, group_key, slot, entries, generations, taken)
  SELECT limited[1], c.group_key, c.slot, array_agg(c.id), array_agg(c.generation), count(*)
    FROM (SELECT c.*, r.slot
     FROM (SELECT c.id::bigint AS id, c.generation::bigint AS generation,
                  CASE WHEN EXISTS (
                    SELECT 1 FROM ${t("outbox")} o
                     WHERE o.topic = limited[1] AND o.group_key > '' AND o.projected_at IS NULL AND o.dead_at IS NULL) THEN (SELECT o.group_key FROM ${t("outbox")} o WHERE o.id = c.id::bigint) ELSE '' END
                    AS group_key,
                  row_number() OVER (ORDER BY c.id::bigint) AS nth
             FROM claimed c WHERE NOT c.exhausted) c
     JOIN ranges r ON c.nth > r.after AND c.nth <= r.upto) c
   GROUP BY c.group_key, c.slot)
SELECT * FROM claimed;
    GET DIAGNOSTICS taken = ROW_COUNT;
  END IF;
-- The rest of the batch from the topics without limits, if the claim may take any.
IF taken < $2 AND ($4 IS NULL OR EXISTS (
     SELECT 1 FROM unnest($4) x(topic) WHERE NOT EXISTS (SELECT 1 FROM ${t("flow_limits")} l WHERE l.topic = x.topic))) THEN
  RETURN QUERY
WITH heads AS (
  SELECT c.id, c.ordering_key FROM ${t("outbox")} c
   WHERE c.projected_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now() AND (c.claimed_until IS NULL OR c.claimed_until <= now()) AND ($4 IS NULL OR c.topic = ANY($4)) AND c.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND c.topic <> ALL(ARRAY(SELECT l.topic FROM ${t("flow_limits")} l))
     AND (c.ordering_key IS NULL OR (
       ((SELECT random()) < 0.0625 OR (c.due_at, c.id) <= (SELECT w.due_at, w.id FROM (
         SELECT w.due_at, w.id FROM ${t("outbox")} w WHERE w.projected_at IS NULL AND w.dead_at IS NULL AND w.available_at <= now() AND (w.claimed_until IS NULL OR w.claimed_until <= now()) AND ($4 IS NULL OR w.topic = ANY($4)) AND w.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND w.topic <> ALL(ARRAY(SELECT l.topic FROM ${t("flow_limits")} l)) ORDER BY w.due_at, w.id LIMIT 1000) w ORDER BY w.due_at DESC, w.id DESC LIMIT 1))
       AND NOT coalesce((
         SELECT true FROM ${t("outbox")} e
          WHERE e.ordering_key = c.ordering_key AND e.ordering_key IS NOT NULL AND e.id < c.id AND e.projected_at IS NULL AND e.dead_at IS NULL
          ORDER BY e.ordering_key, e.id LIMIT 1), false)))
   ORDER BY c.due_at, c.id
   LIMIT ($2 - taken)
   FOR UPDATE SKIP LOCKED),
behind AS (
  SELECT h.id AS head, f.id, f.ready,
         row_number() OVER (PARTITION BY h.id ORDER BY f.id) AS position
    FROM heads h
   CROSS JOIN LATERAL (
     SELECT n.id, (n.available_at <= now() AND (n.claimed_until IS NULL OR n.claimed_until <= now()) AND ($4 IS NULL OR n.topic = ANY($4)) AND n.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND n.topic <> ALL(ARRAY(SELECT l.topic FROM ${t("flow_limits")} l))) AS ready FROM ${t("outbox")} n
      WHERE n.ordering_key = h.ordering_key AND n.id > h.id AND n.projected_at IS NULL AND n.dead_at IS NULL
      ORDER BY n.id
      LIMIT least($6 - 1, ($2 - taken) - (SELECT count(*) FROM heads))) f
   WHERE h.ordering_key IS NOT NULL AND $6 > 1),
reachable AS (
  SELECT b.head, b.id, b.position FROM (
    SELECT b.head, b.id, b.position, bool_and(b.ready) OVER (PARTITION BY b.head ORDER BY b.position) AS reachable
      FROM behind b) b
   WHERE b.reachable),
picked AS (
  SELECT a.head, a.id, a.position FROM (
    SELECT h.id AS head, h.id, 0::bigint AS position FROM heads h
    UNION ALL
    SELECT r.head, r.id, r.position FROM reachable r) a
   ORDER BY a.position, a.id
   LIMIT ($2 - taken)),
locked AS (
  SELECT q.id FROM ${t("outbox")} q
   WHERE q.id = ANY(ARRAY(SELECT p.id FROM picked p WHERE p.position > 0)) AND q.projected_at IS NULL AND q.dead_at IS NULL
   FOR UPDATE SKIP LOCKED),
gaps AS MATERIALIZED (
  SELECT p.head, min(p.position) AS position FROM picked p
   WHERE p.position > 0 AND p.id NOT IN (SELECT l.id FROM locked l)
   GROUP BY p.head),
chosen AS (
  SELECT p.id, p.position FROM picked p LEFT JOIN gaps g ON g.head = p.head
   WHERE p.position = 0 OR g.position IS NULL OR p.position < g.position)
UPDATE ${t("outbox")} q SET
  claimed_by = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.attempt_count ELSE q.attempt_count + 1 END,
  lease_expiries = q.lease_expiries + CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 THEN 1 ELSE 0 END,
  dead_at = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN now() END,
  last_error = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5
    THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT c.id FROM chosen c)) AND q.projected_at IS NULL AND q.dead_at IS NULL
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL,
  q.topic, q.ordering_key, q.payload, q.headers, to_char(q.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
END IF;
  RETURN;
END IF;
-- The limits of this claim's topics, locked in name order: one claim of a limited topic at a time.
limited := ARRAY(
  SELECT l.topic FROM ${t("flow_limits")} l
   WHERE ($4 IS NULL OR l.topic = ANY($4)) AND l.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
   ORDER BY l.topic FOR UPDATE);
-- And every capacity slot of those topics, in order: no claim that took slots is under way.
FOR slot_row IN SELECT l.topic AS value, s.n FROM ${t("flow_limits")} l
     CROSS JOIN LATERAL generate_series(0, least(8, greatest(1, l.max_in_flight / 16)) - 1) s(n)
     WHERE l.topic = ANY(limited) AND l.max_in_flight IS NOT NULL ORDER BY l.topic, s.n LOOP
  PERFORM pg_advisory_xact_lock(hashtext('${t("flow_claims")}:' || slot_row.value), slot_row.n);
END LOOP;
-- The buckets' clock: after the lock, so a claim that waited for it does not spend at the time it began.
clk := clock_timestamp();
-- A group's bucket that has filled up again (or lost its rate) is no row: dropped.
DELETE FROM ${t("flow_group_buckets")} b
 WHERE b.topic = ANY(limited) AND NOT EXISTS (
   SELECT 1 FROM ${t("flow_limits")} l
     LEFT JOIN ${t("flow_group_limits")} o ON o.topic = l.topic AND o.group_key = b.group_key
    WHERE l.topic = b.topic
      AND ${t("flow_tokens")}(b.tokens, b.tokens_at, CASE WHEN o.rate_limit IS NOT NULL THEN o.rate_limit WHEN b.group_key <> '' THEN l.group_rate_limit END, CASE WHEN o.rate_limit IS NOT NULL THEN o.rate_period WHEN b.group_key <> '' THEN l.group_rate_period END, CASE WHEN o.rate_limit IS NOT NULL THEN o.rate_burst WHEN b.group_key <> '' THEN l.group_rate_burst END, clk) < CASE WHEN o.rate_limit IS NOT NULL THEN o.rate_burst WHEN b.group_key <> '' THEN l.group_rate_burst END);
-- A new snapshot from here on: every claim committed before the lock is seen. The capacities
-- no longer taken (their row settled, given back, cancelled, its lease run out) are dropped.
-- Rows a process of the previous release wrote, one per message, join the count as rows of their own.
WITH moved AS (
  DELETE FROM ${t("flow_leases")} f WHERE f.topic = ANY(limited) RETURNING f.id, f.generation, f.topic, f.group_key)
INSERT INTO ${t("flow_claims")} (topic, group_key, entries, generations, taken)
SELECT m.topic, m.group_key, array_agg(m.id), array_agg(m.generation), count(*) FROM moved m GROUP BY 1, 2;
-- What the claims took, at most: counted exactly, message by message, for a topic whose sum leaves
-- less room than this claim asks for, that has per-group limits, or whose rows piled up.
WITH need AS (
  SELECT l.topic FROM ${t("flow_limits")} l
   WHERE l.topic = ANY(limited) AND (
     l.max_in_flight < coalesce((SELECT sum(c.taken) FROM ${t("flow_claims")} c WHERE c.topic = l.topic), 0) + $2
     OR l.group_max_in_flight IS NOT NULL
     OR EXISTS (SELECT 1 FROM ${t("flow_group_limits")} g WHERE g.topic = l.topic AND g.max_in_flight IS NOT NULL)
     OR (SELECT count(*) FROM ${t("flow_claims")} c WHERE c.topic = l.topic) > 32)),
counted AS (
  SELECT c.id, (SELECT count(*) FROM unnest(c.entries, c.generations) u(id, generation) WHERE coalesce((
   SELECT true FROM ${t("outbox")} o
    WHERE o.id = u.id AND o.claim_generation = u.generation AND o.projected_at IS NULL AND o.dead_at IS NULL
      AND o.claimed_until > now()), false)) AS n
    FROM ${t("flow_claims")} c WHERE c.topic IN (SELECT n.topic FROM need n)),
gone AS (
  DELETE FROM ${t("flow_claims")} c USING counted k WHERE c.id = k.id AND k.n = 0)
UPDATE ${t("flow_claims")} c SET taken = k.n FROM counted k WHERE c.id = k.id AND k.n > 0 AND c.taken <> k.n;
-- A group at or behind the topic's virtual time holds nothing a new one would not: forgotten.
DELETE FROM ${t("flow_group_state")} s USING ${t("flow_limits")} l
 WHERE l.topic = ANY(limited) AND s.topic = l.topic AND s.vtime <= l.vclock;
taken := 0;
-- At the limit (what a claim most often finds while the slots are busy): nothing more to read.
IF EXISTS (
  SELECT 1 FROM ${t("flow_limits")} l
   WHERE l.topic = ANY(limited)
     AND (l.max_in_flight IS NULL OR l.max_in_flight > coalesce((SELECT sum(c.taken) FROM ${t("flow_claims")} c WHERE c.topic = l.topic), 0)) AND (l.rate_limit IS NULL OR ${t("flow_tokens")}(l.tokens, l.tokens_at, l.rate_limit, l.rate_period, l.rate_burst, clk) >= 1))
THEN
  IF array_length(limited, 1) = 1
     AND NOT EXISTS (
       SELECT 1 FROM ${t("flow_limits")} l
        WHERE l.topic = limited[1]
          AND (l.rate_limit IS NOT NULL OR l.group_rate_limit IS NOT NULL OR l.group_max_in_flight IS NOT NULL))
     AND NOT EXISTS (SELECT 1 FROM ${t("flow_group_limits")} g WHERE g.topic = limited[1])
     AND NOT EXISTS (
       SELECT 1 FROM ${t("outbox")} o
        WHERE o.topic = limited[1] AND o.group_key > '' AND o.projected_at IS NULL AND o.dead_at IS NULL) THEN
    SELECT CASE WHEN l.max_in_flight IS NULL THEN $2
                ELSE least($2, greatest(l.max_in_flight - coalesce((SELECT sum(c.taken) FROM ${t("flow_claims")} c WHERE c.topic = l.topic), 0), 0))::integer END
      INTO single_free FROM ${t("flow_limits")} l WHERE l.topic = limited[1];
    RETURN QUERY
WITH claimed (id, generation, attempt, exhausted, topic, ordering_key, payload, headers, created_at) AS (
WITH heads AS (
  SELECT c.id, c.ordering_key FROM ${t("outbox")} c
   WHERE c.projected_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now() AND (c.claimed_until IS NULL OR c.claimed_until <= now()) AND ($4 IS NULL OR c.topic = ANY($4)) AND c.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND c.topic = ANY(limited)
     AND (c.ordering_key IS NULL OR (
       ((SELECT random()) < 0.0625 OR (c.due_at, c.id) <= (SELECT w.due_at, w.id FROM (
         SELECT w.due_at, w.id FROM ${t("outbox")} w WHERE w.projected_at IS NULL AND w.dead_at IS NULL AND w.available_at <= now() AND (w.claimed_until IS NULL OR w.claimed_until <= now()) AND ($4 IS NULL OR w.topic = ANY($4)) AND w.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND w.topic = ANY(limited) ORDER BY w.due_at, w.id LIMIT 1000) w ORDER BY w.due_at DESC, w.id DESC LIMIT 1))
       AND NOT coalesce((
         SELECT true FROM ${t("outbox")} e
          WHERE e.ordering_key = c.ordering_key AND e.ordering_key IS NOT NULL AND e.id < c.id AND e.projected_at IS NULL AND e.dead_at IS NULL
          ORDER BY e.ordering_key, e.id LIMIT 1), false)))
   ORDER BY c.due_at, c.id
   LIMIT single_free
   FOR UPDATE SKIP LOCKED),
behind AS (
  SELECT h.id AS head, f.id, f.ready,
         row_number() OVER (PARTITION BY h.id ORDER BY f.id) AS position
    FROM heads h
   CROSS JOIN LATERAL (
     SELECT n.id, (n.available_at <= now() AND (n.claimed_until IS NULL OR n.claimed_until <= now()) AND ($4 IS NULL OR n.topic = ANY($4)) AND n.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND n.topic = ANY(limited)) AS ready FROM ${t("outbox")} n
      WHERE n.ordering_key = h.ordering_key AND n.id > h.id AND n.projected_at IS NULL AND n.dead_at IS NULL
      ORDER BY n.id
      LIMIT least($6 - 1, single_free - (SELECT count(*) FROM heads))) f
   WHERE h.ordering_key IS NOT NULL AND $6 > 1),
reachable AS (
  SELECT b.head, b.id, b.position FROM (
    SELECT b.head, b.id, b.position, bool_and(b.ready) OVER (PARTITION BY b.head ORDER BY b.position) AS reachable
      FROM behind b) b
   WHERE b.reachable),
picked AS (
  SELECT a.head, a.id, a.position FROM (
    SELECT h.id AS head, h.id, 0::bigint AS position FROM heads h
    UNION ALL
    SELECT r.head, r.id, r.position FROM reachable r) a
   ORDER BY a.position, a.id
   LIMIT single_free),
locked AS (
  SELECT q.id FROM ${t("outbox")} q
   WHERE q.id = ANY(ARRAY(SELECT p.id FROM picked p WHERE p.position > 0)) AND q.projected_at IS NULL AND q.dead_at IS NULL
   FOR UPDATE SKIP LOCKED),
gaps AS MATERIALIZED (
  SELECT p.head, min(p.position) AS position FROM picked p
   WHERE p.position > 0 AND p.id NOT IN (SELECT l.id FROM locked l)
   GROUP BY p.head),
chosen AS (
  SELECT p.id, p.position FROM picked p LEFT JOIN gaps g ON g.head = p.head
   WHERE p.position = 0 OR g.position IS NULL OR p.position < g.position)
UPDATE ${t("outbox")} q SET
  claimed_by = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.attempt_count ELSE q.attempt_count + 1 END,
  lease_expiries = q.lease_expiries + CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 THEN 1 ELSE 0 END,
  dead_at = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN now() END,
  last_error = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5
    THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT c.id FROM chosen c)) AND q.projected_at IS NULL AND q.dead_at IS NULL
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL,
  q.topic, q.ordering_key, q.payload, q.headers, to_char(q.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
recorded AS (
  INSERT INTO ${t("flow_claims")} (topic, group_key, entries, generations, taken)
  SELECT o.topic, o.group_key, array_agg(o.id), array_agg(c.generation::bigint), count(*)
    FROM claimed c JOIN ${t("outbox")} o ON o.id = c.id::bigint
   WHERE NOT c.exhausted
   GROUP BY o.topic, o.group_key)
SELECT * FROM claimed;
    GET DIAGNOSTICS taken = ROW_COUNT;
  ELSE
  -- Each group's messages are read in index order until its few are found: a bitmap scan would
  -- read a group's whole backlog and sort it (the plan is made once, under this setting).
  PERFORM set_config('enable_bitmapscan', 'off', true);
  RETURN QUERY
WITH RECURSIVE
lim AS (
  SELECT l.topic, l.max_in_flight, l.group_max_in_flight, ${t("flow_tokens")}(l.tokens, l.tokens_at, l.rate_limit, l.rate_period, l.rate_burst, clk) AS tokens,
         l.group_rate_limit, l.group_rate_period, l.group_rate_burst FROM ${t("flow_limits")} l WHERE l.topic = ANY(limited)),
busy AS (
  SELECT c.topic, c.group_key, sum(c.taken) AS n FROM ${t("flow_claims")} c WHERE c.topic = ANY(limited) GROUP BY 1, 2),
topic_free AS (
  SELECT l.topic, least(CASE WHEN l.max_in_flight IS NULL THEN $2
    ELSE greatest(l.max_in_flight - coalesce((SELECT sum(b.n) FROM busy b WHERE b.topic = l.topic), 0), 0)::integer END, floor(l.tokens)::integer) AS free
    FROM lim l),
named AS (
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
      -- A group's own limit, else the topic's per-group one (messages without a group: none).
      SELECT g.topic, g.group_key, coalesce(o.max_in_flight, CASE WHEN g.group_key <> '' THEN l.group_max_in_flight END) AS cap,
             ${t("flow_tokens")}(u.tokens, u.tokens_at, CASE WHEN o.rate_limit IS NOT NULL THEN o.rate_limit WHEN g.group_key <> '' THEN l.group_rate_limit END, CASE WHEN o.rate_limit IS NOT NULL THEN o.rate_period WHEN g.group_key <> '' THEN l.group_rate_period END, CASE WHEN o.rate_limit IS NOT NULL THEN o.rate_burst WHEN g.group_key <> '' THEN l.group_rate_burst END, clk) AS tokens
        FROM grouped g JOIN lim l ON l.topic = g.topic
        LEFT JOIN ${t("flow_group_limits")} o ON o.topic = g.topic AND o.group_key = g.group_key
        LEFT JOIN ${t("flow_group_buckets")} u ON u.topic = g.topic AND u.group_key = g.group_key) g
    JOIN topic_free tf ON tf.topic = g.topic
    LEFT JOIN busy b ON b.topic = g.topic AND b.group_key = g.group_key
    LEFT JOIN ${t("flow_group_limits")} o ON o.topic = g.topic AND o.group_key = g.group_key
    LEFT JOIN ${t("flow_group_state")} s ON s.topic = g.topic AND s.group_key = g.group_key),
candidates AS (
  -- Each group's first ready messages, in id order through the group index.
  SELECT c.id, c.topic, c.generation, q.group_key, q.vtime, q.weight,
         row_number() OVER (PARTITION BY q.topic, q.group_key ORDER BY c.due_at, c.id) AS nth
    FROM quota q CROSS JOIN LATERAL (
      SELECT c.id, c.topic, c.claim_generation AS generation, c.due_at FROM ${t("outbox")} c
       WHERE c.topic = q.topic AND c.group_key = q.group_key AND c.projected_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now() AND (c.claimed_until IS NULL OR c.claimed_until <= now()) AND ($4 IS NULL OR c.topic = ANY($4)) AND c.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND (c.ordering_key IS NULL OR NOT coalesce((
         SELECT true FROM ${t("outbox")} e
          WHERE e.ordering_key = c.ordering_key AND e.ordering_key IS NOT NULL AND e.id < c.id AND e.projected_at IS NULL AND e.dead_at IS NULL
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
  INSERT INTO ${t("flow_claims")} (topic, group_key, slot, entries, generations, taken)
  SELECT l.topic, l.group_key, coalesce(r.slot, 0), array_agg(l.id), array_agg(l.claim_generation + 1), count(*)
    FROM (SELECT l.*, row_number() OVER (PARTITION BY l.topic ORDER BY l.id) AS nth FROM locked l) l
    LEFT JOIN (
      SELECT r.topic, r.slot, sum(r.room) OVER w - r.room AS after, sum(r.room) OVER w AS upto
        FROM (
          SELECT f.topic, s.n AS slot, greatest((CASE WHEN s.n < least(8, greatest(1, f.max_in_flight / 16)) THEN f.max_in_flight / least(8, greatest(1, f.max_in_flight / 16)) + CASE WHEN s.n < f.max_in_flight % least(8, greatest(1, f.max_in_flight / 16)) THEN 1 ELSE 0 END ELSE 0 END) - coalesce((
                   SELECT sum(c.taken) FROM ${t("flow_claims")} c WHERE c.topic = f.topic AND c.slot = s.n), 0), 0) AS room
            FROM ${t("flow_limits")} f CROSS JOIN LATERAL generate_series(0, least(8, greatest(1, f.max_in_flight / 16)) - 1) s(n)
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
   WHERE l.topic = m.topic AND (l.vclock < k.now OR s.n > 0))
UPDATE ${t("outbox")} q SET
  claimed_by = CASE WHEN q.claimed_until IS NOT NULL AND 0 = 0 AND q.lease_expiries + 1 >= $5 THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN q.claimed_until IS NOT NULL AND 0 = 0 AND q.lease_expiries + 1 >= $5 THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN q.claimed_until IS NOT NULL AND 0 = 0 AND q.lease_expiries + 1 >= $5 THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN q.claimed_until IS NOT NULL AND 0 = 0 AND q.lease_expiries + 1 >= $5 THEN q.attempt_count ELSE q.attempt_count + 1 END,
  lease_expiries = q.lease_expiries + CASE WHEN q.claimed_until IS NOT NULL AND 0 = 0 THEN 1 ELSE 0 END,
  dead_at = CASE WHEN q.claimed_until IS NOT NULL AND 0 = 0 AND q.lease_expiries + 1 >= $5 THEN now() END,
  last_error = CASE WHEN q.claimed_until IS NOT NULL AND 0 = 0 AND q.lease_expiries + 1 >= $5
    THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT l.id FROM locked l)) AND q.projected_at IS NULL AND q.dead_at IS NULL
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL,
  q.topic, q.ordering_key, q.payload, q.headers, to_char(q.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
  GET DIAGNOSTICS taken = ROW_COUNT;
  PERFORM set_config('enable_bitmapscan', 'on', true);
  END IF;
END IF;
-- The rest of the batch from the topics without limits, if the claim may take any.
IF taken < $2 AND ($4 IS NULL OR EXISTS (
     SELECT 1 FROM unnest($4) x(topic) WHERE NOT EXISTS (SELECT 1 FROM ${t("flow_limits")} l WHERE l.topic = x.topic))) THEN
  RETURN QUERY
WITH heads AS (
  SELECT c.id, c.ordering_key FROM ${t("outbox")} c
   WHERE c.projected_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now() AND (c.claimed_until IS NULL OR c.claimed_until <= now()) AND ($4 IS NULL OR c.topic = ANY($4)) AND c.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND c.topic <> ALL(ARRAY(SELECT l.topic FROM ${t("flow_limits")} l))
     AND (c.ordering_key IS NULL OR (
       ((SELECT random()) < 0.0625 OR (c.due_at, c.id) <= (SELECT w.due_at, w.id FROM (
         SELECT w.due_at, w.id FROM ${t("outbox")} w WHERE w.projected_at IS NULL AND w.dead_at IS NULL AND w.available_at <= now() AND (w.claimed_until IS NULL OR w.claimed_until <= now()) AND ($4 IS NULL OR w.topic = ANY($4)) AND w.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND w.topic <> ALL(ARRAY(SELECT l.topic FROM ${t("flow_limits")} l)) ORDER BY w.due_at, w.id LIMIT 1000) w ORDER BY w.due_at DESC, w.id DESC LIMIT 1))
       AND NOT coalesce((
         SELECT true FROM ${t("outbox")} e
          WHERE e.ordering_key = c.ordering_key AND e.ordering_key IS NOT NULL AND e.id < c.id AND e.projected_at IS NULL AND e.dead_at IS NULL
          ORDER BY e.ordering_key, e.id LIMIT 1), false)))
   ORDER BY c.due_at, c.id
   LIMIT ($2 - taken)
   FOR UPDATE SKIP LOCKED),
behind AS (
  SELECT h.id AS head, f.id, f.ready,
         row_number() OVER (PARTITION BY h.id ORDER BY f.id) AS position
    FROM heads h
   CROSS JOIN LATERAL (
     SELECT n.id, (n.available_at <= now() AND (n.claimed_until IS NULL OR n.claimed_until <= now()) AND ($4 IS NULL OR n.topic = ANY($4)) AND n.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)) AND n.topic <> ALL(ARRAY(SELECT l.topic FROM ${t("flow_limits")} l))) AS ready FROM ${t("outbox")} n
      WHERE n.ordering_key = h.ordering_key AND n.id > h.id AND n.projected_at IS NULL AND n.dead_at IS NULL
      ORDER BY n.id
      LIMIT least($6 - 1, ($2 - taken) - (SELECT count(*) FROM heads))) f
   WHERE h.ordering_key IS NOT NULL AND $6 > 1),
reachable AS (
  SELECT b.head, b.id, b.position FROM (
    SELECT b.head, b.id, b.position, bool_and(b.ready) OVER (PARTITION BY b.head ORDER BY b.position) AS reachable
      FROM behind b) b
   WHERE b.reachable),
picked AS (
  SELECT a.head, a.id, a.position FROM (
    SELECT h.id AS head, h.id, 0::bigint AS position FROM heads h
    UNION ALL
    SELECT r.head, r.id, r.position FROM reachable r) a
   ORDER BY a.position, a.id
   LIMIT ($2 - taken)),
locked AS (
  SELECT q.id FROM ${t("outbox")} q
   WHERE q.id = ANY(ARRAY(SELECT p.id FROM picked p WHERE p.position > 0)) AND q.projected_at IS NULL AND q.dead_at IS NULL
   FOR UPDATE SKIP LOCKED),
gaps AS MATERIALIZED (
  SELECT p.head, min(p.position) AS position FROM picked p
   WHERE p.position > 0 AND p.id NOT IN (SELECT l.id FROM locked l)
   GROUP BY p.head),
chosen AS (
  SELECT p.id, p.position FROM picked p LEFT JOIN gaps g ON g.head = p.head
   WHERE p.position = 0 OR g.position IS NULL OR p.position < g.position)
UPDATE ${t("outbox")} q SET
  claimed_by = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN q.attempt_count ELSE q.attempt_count + 1 END,
  lease_expiries = q.lease_expiries + CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 THEN 1 ELSE 0 END,
  dead_at = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5 THEN now() END,
  last_error = CASE WHEN q.claimed_until IS NOT NULL AND CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END = 0 AND q.lease_expiries + 1 >= $5
    THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT c.id FROM chosen c)) AND q.projected_at IS NULL AND q.dead_at IS NULL
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL,
  q.topic, q.ordering_key, q.payload, q.headers, to_char(q.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
END IF;
END
$claim$`,
  `CREATE OR REPLACE FUNCTION ${t("inbox_claim")}(text, integer, double precision, text, integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    consumer text, message_id text, payload jsonb, headers jsonb, received_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
DECLARE
  clk timestamptz;
  cap integer;
  taken_now bigint;
  claim_rows bigint;
  claim_row record;
  still integer;
  free integer;
  rated boolean;
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
  slot_still integer;
BEGIN
PERFORM pg_advisory_xact_lock_shared('${t("inbox_limits")}'::regclass::oid::integer, 17);
SELECT l.max_in_flight, l.rate_limit IS NOT NULL INTO cap, rated FROM ${t("inbox_limits")} l WHERE l.consumer = $4;
IF NOT FOUND THEN
  RETURN QUERY
WITH ready AS (
  SELECT c.id FROM ${t("inbox")} c
   WHERE c.processed_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now()
     AND (c.claimed_until IS NULL OR c.claimed_until <= now())
     AND c.consumer = $4
   ORDER BY c.id
   LIMIT $2
   FOR UPDATE SKIP LOCKED)
UPDATE ${t("inbox")} q SET
  claimed_by = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN q.attempt_count ELSE q.attempt_count + 1 END,
  lease_expiries = q.lease_expiries + CASE WHEN q.claimed_until IS NOT NULL THEN 1 ELSE 0 END,
  dead_at = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN now() END,
  last_error = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5
    THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT r.id FROM ready r))
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL, q.consumer, q.message_id, q.payload, q.headers, to_char(q.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
  RETURN;
END IF;
IF cap IS NOT NULL AND NOT rated THEN
  -- Only an in-flight limit: the claim takes capacity slots, not the limits row.
slot_count := least(8, greatest(1, cap / 16));
-- The slots, those that seem to leave the most first (as committed now; each is counted once held).
slot_order := ARRAY(
  SELECT s.n FROM generate_series(0, slot_count - 1) s(n)
   ORDER BY coalesce((SELECT sum(c.taken) FROM ${t("inbox_flow_claims")} c WHERE c.consumer = $4 AND c.slot = s.n), 0)
            - (CASE WHEN s.n < slot_count THEN cap / slot_count + CASE WHEN s.n < cap % slot_count THEN 1 ELSE 0 END ELSE 0 END), random());
held_slots := '{}';
slot_rooms := '{}';
room := 0;
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
    slot_overflow := (SELECT coalesce(sum(greatest(o.n - (CASE WHEN o.slot < slot_count THEN cap / slot_count + CASE WHEN o.slot < cap % slot_count THEN 1 ELSE 0 END ELSE 0 END), 0)), 0) FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("inbox_flow_claims")} c WHERE c.consumer = $4 GROUP BY c.slot) o);
    IF slot_overflow > 0 THEN
      -- Rows written past a slot's share (by a claim that held every slot, a new limit): counted exactly.
      FOR slot_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${t("inbox_flow_claims")} c
     WHERE c.consumer = $4 AND c.slot IN (SELECT o.slot FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("inbox_flow_claims")} c WHERE c.consumer = $4 GROUP BY c.slot) o WHERE o.n > (CASE WHEN o.slot < slot_count THEN cap / slot_count + CASE WHEN o.slot < cap % slot_count THEN 1 ELSE 0 END ELSE 0 END)) ORDER BY c.id FOR UPDATE SKIP LOCKED LOOP
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
      slot_overflow := (SELECT coalesce(sum(greatest(o.n - (CASE WHEN o.slot < slot_count THEN cap / slot_count + CASE WHEN o.slot < cap % slot_count THEN 1 ELSE 0 END ELSE 0 END), 0)), 0) FROM (SELECT c.slot, sum(c.taken) AS n FROM ${t("inbox_flow_claims")} c WHERE c.consumer = $4 GROUP BY c.slot) o);
    END IF;
  END IF;
  held_slots := held_slots || slot_no;
  SELECT coalesce(sum(c.taken), 0), count(*) INTO slot_taken, slot_rows
    FROM ${t("inbox_flow_claims")} c WHERE c.consumer = $4 AND c.slot = slot_no;
  -- Counted exactly, oldest claim first (the likeliest settled), only where the sum of \`taken\`
  -- leaves less than the claim could use of this slot, or the rows piled up.
  IF (CASE WHEN slot_no < slot_count THEN cap / slot_count + CASE WHEN slot_no < cap % slot_count THEN 1 ELSE 0 END ELSE 0 END) - slot_taken - slot_overflow < least($2 - room, (CASE WHEN slot_no < slot_count THEN cap / slot_count + CASE WHEN slot_no < cap % slot_count THEN 1 ELSE 0 END ELSE 0 END)) OR slot_rows > 32 THEN
    FOR slot_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${t("inbox_flow_claims")} c
     WHERE c.consumer = $4 AND c.slot = slot_no ORDER BY c.id FOR UPDATE SKIP LOCKED LOOP
      EXIT WHEN (CASE WHEN slot_no < slot_count THEN cap / slot_count + CASE WHEN slot_no < cap % slot_count THEN 1 ELSE 0 END ELSE 0 END) - slot_taken - slot_overflow >= least($2 - room, (CASE WHEN slot_no < slot_count THEN cap / slot_count + CASE WHEN slot_no < cap % slot_count THEN 1 ELSE 0 END ELSE 0 END)) AND slot_rows <= 32;
      slot_still := (SELECT count(*) FROM unnest(slot_row.entries, slot_row.generations) u(id, generation) WHERE coalesce((
       SELECT true FROM ${t("inbox")} i
        WHERE i.id = u.id AND i.claim_generation = u.generation AND i.processed_at IS NULL
          AND i.dead_at IS NULL AND i.claimed_until > now()), false));
      IF slot_still = 0 THEN
        DELETE FROM ${t("inbox_flow_claims")} c WHERE c.id = slot_row.id;
      ELSIF slot_still < slot_row.taken THEN
        UPDATE ${t("inbox_flow_claims")} c SET taken = slot_still WHERE c.id = slot_row.id;
      END IF;
      IF slot_still = 0 THEN
        slot_rows := slot_rows - 1;
      END IF;
      slot_taken := slot_taken - slot_row.taken + slot_still;
    END LOOP;
  END IF;
  slot_rooms := slot_rooms || greatest(least((CASE WHEN slot_no < slot_count THEN cap / slot_count + CASE WHEN slot_no < cap % slot_count THEN 1 ELSE 0 END ELSE 0 END) - slot_taken - slot_overflow, $2 - room), 0)::integer;
  room := room + slot_rooms[cardinality(slot_rooms)];
  EXIT WHEN room >= $2;
END LOOP;
  IF room < 1 THEN
    RETURN;
  END IF;
  RETURN QUERY
WITH claimed (id, generation, attempt, exhausted, consumer, message_id, payload, headers, received_at) AS (
WITH ready AS (
  SELECT c.id FROM ${t("inbox")} c
   WHERE c.processed_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now()
     AND (c.claimed_until IS NULL OR c.claimed_until <= now())
     AND c.consumer = $4
   ORDER BY c.id
   LIMIT room
   FOR UPDATE SKIP LOCKED)
UPDATE ${t("inbox")} q SET
  claimed_by = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN q.attempt_count ELSE q.attempt_count + 1 END,
  lease_expiries = q.lease_expiries + CASE WHEN q.claimed_until IS NOT NULL THEN 1 ELSE 0 END,
  dead_at = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN now() END,
  last_error = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5
    THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT r.id FROM ready r))
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL, q.consumer, q.message_id, q.payload, q.headers, to_char(q.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
ranges AS MATERIALIZED (
  SELECT h.slot, sum(h.room) OVER (ORDER BY h.nth) - h.room AS after, sum(h.room) OVER (ORDER BY h.nth) AS upto
    FROM unnest(held_slots, slot_rooms) WITH ORDINALITY h(slot, room, nth)),
recorded AS (
  INSERT INTO ${t("inbox_flow_claims")} (consumer, slot, entries, generations, taken)
  SELECT $4, c.slot, array_agg(c.id), array_agg(c.generation), count(*) FROM (SELECT c.*, r.slot
     FROM (SELECT c.id::bigint AS id, c.generation::bigint AS generation,
                  row_number() OVER (ORDER BY c.id::bigint) AS nth
             FROM claimed c WHERE NOT c.exhausted) c
     JOIN ranges r ON c.nth > r.after AND c.nth <= r.upto) c GROUP BY c.slot)
SELECT * FROM claimed;
  RETURN;
END IF;
-- A rate: the consumer's limits, locked (one claim of it at a time, so no two spend a token), and every slot.
SELECT l.max_in_flight INTO cap FROM ${t("inbox_limits")} l WHERE l.consumer = $4 FOR UPDATE;
IF cap IS NOT NULL THEN
FOR slot_row IN SELECT $4 AS value, s.n FROM generate_series(0, least(8, greatest(1, cap / 16)) - 1) s(n) ORDER BY s.n LOOP
  PERFORM pg_advisory_xact_lock(hashtext('${t("inbox_flow_claims")}:' || slot_row.value), slot_row.n);
END LOOP;
END IF;
-- The bucket's clock: after the lock, so a claim that waited for it does not spend at the time it began.
clk := clock_timestamp();
IF cap IS NOT NULL THEN
  -- A new snapshot from here on: every claim committed before the lock is seen. What the claims
  -- took, at most.
  SELECT coalesce(sum(c.taken), 0), count(*) INTO taken_now, claim_rows FROM ${t("inbox_flow_claims")} c WHERE c.consumer = $4;
  -- Counted exactly (each entry probed by id, a claim with nothing held left dropped) only when
  -- that leaves less room than this claim asks for, or the rows piled up: oldest claims first
  -- (the likeliest settled), until the room is found.
  IF taken_now + $2 > cap OR claim_rows > 32 THEN
    FOR claim_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${t("inbox_flow_claims")} c WHERE c.consumer = $4 ORDER BY c.id LOOP
      EXIT WHEN taken_now + $2 <= cap AND claim_rows <= 32;
      SELECT count(*) INTO still FROM unnest(claim_row.entries, claim_row.generations) u(id, generation) WHERE coalesce((
       SELECT true FROM ${t("inbox")} i
        WHERE i.id = u.id AND i.claim_generation = u.generation AND i.processed_at IS NULL
          AND i.dead_at IS NULL AND i.claimed_until > now()), false);
      IF still = 0 THEN
        DELETE FROM ${t("inbox_flow_claims")} c WHERE c.id = claim_row.id;
        claim_rows := claim_rows - 1;
      ELSIF still < claim_row.taken THEN
        UPDATE ${t("inbox_flow_claims")} c SET taken = still WHERE c.id = claim_row.id;
      END IF;
      taken_now := taken_now - claim_row.taken + still;
    END LOOP;
  END IF;
END IF;
SELECT least($2,
         CASE WHEN cap IS NULL THEN $2 ELSE greatest(cap - taken_now, 0)::integer END,
         CASE WHEN l.rate_limit IS NULL THEN $2 ELSE floor(${t("flow_tokens")}(l.tokens, l.tokens_at, l.rate_limit, l.rate_period, l.rate_burst, clk))::integer END)
  INTO free FROM ${t("inbox_limits")} l WHERE l.consumer = $4;
IF free < 1 THEN
  RETURN;
END IF;
RETURN QUERY
WITH claimed (id, generation, attempt, exhausted, consumer, message_id, payload, headers, received_at) AS (
WITH ready AS (
  SELECT c.id FROM ${t("inbox")} c
   WHERE c.processed_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now()
     AND (c.claimed_until IS NULL OR c.claimed_until <= now())
     AND c.consumer = $4
   ORDER BY c.id
   LIMIT free
   FOR UPDATE SKIP LOCKED)
UPDATE ${t("inbox")} q SET
  claimed_by = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN q.attempt_count ELSE q.attempt_count + 1 END,
  lease_expiries = q.lease_expiries + CASE WHEN q.claimed_until IS NOT NULL THEN 1 ELSE 0 END,
  dead_at = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5 THEN now() END,
  last_error = CASE WHEN q.claimed_until IS NOT NULL AND q.lease_expiries + 1 >= $5
    THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT r.id FROM ready r))
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL, q.consumer, q.message_id, q.payload, q.headers, to_char(q.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
recorded AS (
  -- What this claim took, one row (a consumer with an in-flight limit only).
  INSERT INTO ${t("inbox_flow_claims")} (consumer, entries, generations, taken)
  SELECT $4, array_agg(c.id::bigint), array_agg(c.generation::bigint), count(*) FROM claimed c
   WHERE NOT c.exhausted AND cap IS NOT NULL
  HAVING count(*) > 0),
spent AS (
  -- A consumer with a rate spends a token per entry taken.
  UPDATE ${t("inbox_limits")} l SET tokens = ${t("flow_tokens")}(l.tokens, l.tokens_at, l.rate_limit, l.rate_period, l.rate_burst, clk) - (SELECT count(*) FROM claimed c WHERE NOT c.exhausted),
                                   tokens_at = clk
   WHERE l.consumer = $4 AND l.rate_limit IS NOT NULL)
SELECT * FROM claimed;
END
$claim$`
]
