/**
 * Version 12, released: never edit it (a test holds its text); add the next version instead.
 *
 * Keyed runs: the outbox claim takes, with the head of an ordering key, the messages of that
 * key right behind it (up to its sixth argument, `per_key`, each), so one claim delivers a
 * key's backlog in order instead of one message per claim. A run is a prefix of the key's open
 * messages: it stops at the first one that is not ready (delayed, held by a live lease, of a
 * topic this claim does not take, paused) or that another transaction holds locked, and the
 * limit cuts runs breadth-first (every head, then every second message, ...), so no message is
 * handed out without every open message of its key before it in the same claim. The runs are
 * cut to the limit before they are locked (a claim locks what it may take, not a key's whole
 * backlog). Every step over the claim's own rows is an array probe, a hashed anti-join or a
 * join with the (materialized, usually empty) gaps: never a join of two CTEs of the claim's
 * size, nor a subquery per row (a generic plan estimates one row each and nests the loops —
 * 4.5 s and 0.5 s for a claim in the first two versions of this query).
 *
 * Why the head decides: only the holder of a key's head can take what follows it. Every claim,
 * of this version or version 8's, refuses a keyed row with an open row of its key before it
 * unless that row is its own run's, and the head is locked (`FOR UPDATE SKIP LOCKED`) by the
 * claim that takes it, so two claims never split one key between them.
 *
 * A give-back of messages never started (`<queue>_give_back_unstarted_many`, both queues) takes
 * back the attempt its claim counted: the rest of a run behind a failure, a batch whose leases
 * are in doubt. Its next delivery is the same attempt. (A shutdown's give-back, of messages
 * that may be mid-delivery, keeps counting: `give_back_many` is unchanged.)
 *
 * Version 8's five-argument claim stays for one release: processes of the previous release,
 * still running during a rolling deploy, call it (they claim heads only, which is safe beside
 * runs). The version after the next one drops it. `per_key` 1 is version 8's rule exactly.
 */
import type { Migration } from "../../Migrations.js"

const iso = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`

/**
 * The claim's conditions over a row aliased `c`. `also` narrows the topics a claim takes
 * (version 17 claims limited topics apart; this version passes nothing).
 */
export const claimConditions = (t: (table: string) => string, also: (c: string) => string = () => "") => {
  const paused = `ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)`
  const taken = (c: string) => `($4 IS NULL OR ${c}.topic = ANY($4)) AND ${c}.topic <> ALL(${paused})${also(c)}`
  const ready = (c: string) =>
    `${c}.available_at <= now() AND (${c}.claimed_until IS NULL OR ${c}.claimed_until <= now()) AND ${taken(c)}`
  const open = (c: string) => `${c}.projected_at IS NULL AND ${c}.dead_at IS NULL`
  return { taken, ready, open }
}

/**
 * The claim's last step: leases the rows of `chosen` (id, position: 0 for a key's head or an
 * unkeyed message) and returns them; a row out of leases is dead instead.
 */
export const claimUpdate = (
  t: (table: string) => string,
  /** Where the rows come from (version 17 names them by id and has heads only); this version: `chosen`. */
  rows: { readonly from: string; readonly where: string; readonly position: string } = {
    from: "\n  FROM chosen c",
    where: "q.id = c.id",
    position: "c.position"
  }
) => {
  const outbox = t("outbox")
  const { open } = claimConditions(t)
  // A lease that ran out is counted on a key's head only (or an unkeyed message): the rest of
  // a run were never started while an earlier message of their key was unsettled.
  const expired = `q.claimed_until IS NOT NULL AND ${rows.position} = 0`
  const exhausted = `${expired} AND q.lease_expiries + 1 >= $5`
  return `UPDATE ${outbox} q SET
  claimed_by = CASE WHEN ${exhausted} THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN ${exhausted} THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN ${exhausted} THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN ${exhausted} THEN q.attempt_count ELSE q.attempt_count + 1 END,
  lease_expiries = q.lease_expiries + CASE WHEN ${expired} THEN 1 ELSE 0 END,
  dead_at = CASE WHEN ${exhausted} THEN now() END,
  last_error = CASE WHEN ${exhausted}
    THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
    ELSE q.last_error END${rows.from}
 WHERE ${rows.where} AND ${open("q")}
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL,
  q.topic, q.ordering_key, q.payload, q.headers, ${iso("q.created_at")}`
}

/**
 * The order a claim takes ready messages in: this version's is id order; version 21's is
 * by due time (`due_at`), then id.
 */
export interface ClaimOrder {
  /** The ORDER BY list over a row `c`. */
  readonly by: string
  /** The columns of `c` that order needs besides its id (`, c.x` each; none for id order). */
  readonly columns: string
  /**
   * That `c` is among the first 1,000 ready messages in this order (a keyed head is taken only
   * there; version 21 looks past it in one claim of 16); `first(select, by)` is their query,
   * selecting `select` of `w`, ordered by `by`.
   */
  readonly window: (first: (select: string, by: string) => string) => string
  /** More settings of the claim function (`\n  SET name = value` each; none for id order). */
  readonly settings: string
}

/** This version's order: by id. */
export const idOrder: ClaimOrder = {
  by: "c.id",
  columns: "",
  settings: "",
  window: (first) =>
    `c.id <= (SELECT max(w.id) FROM (
         ${first("w.id", "w.id")}) w)`
}

/**
 * That an open message of `c`'s key stands before it (this version: an EXISTS; version 24 asks
 * for the first one in the key index's order, which only that index gives).
 */
export const aheadInKey = (t: (table: string) => string) => (c: string) =>
  `EXISTS (
         SELECT 1 FROM ${t("outbox")} e
          WHERE ${earlierInKey(t, c)})`

/** An open message `e` of `c`'s key before it (what `aheadInKey` and version 24's probe look for). */
export const earlierInKey = (t: (table: string) => string, c: string) =>
  `e.ordering_key = ${c}.ordering_key AND e.ordering_key IS NOT NULL AND e.id < ${c}.id AND ${
    claimConditions(t).open("e")
  }`

/**
 * The claim's query. $1 worker, $2 limit, $3 lease in seconds, $4 topics (NULL: all), $5 the
 * most leases a row may lose, $6 the most messages of one key per claim. Version 17 narrows
 * the topics (`also`) and the limit (`limit`, an expression; this version: $2); version 20
 * updates the rows by id (`update`: the last step over `chosen`; this version: `claimUpdate`);
 * version 21 the order (`order`); version 24 the probe of a key's earlier messages (`ahead`).
 */
export const claimQuery = (
  t: (table: string) => string,
  also: (c: string) => string = () => "",
  limit = "$2",
  update = claimUpdate(t),
  order: ClaimOrder = idOrder,
  ahead: (c: string) => string = aheadInKey(t)
) => {
  const outbox = t("outbox")
  const { open, ready } = claimConditions(t, also)
  const first = (select: string, by: string) =>
    `SELECT ${select} FROM ${outbox} w WHERE ${open("w")} AND ${ready("w")} ORDER BY ${by} LIMIT 1000`
  return `WITH heads AS (
  SELECT c.id, c.ordering_key FROM ${outbox} c
   WHERE ${open("c")} AND ${ready("c")}
     AND (c.ordering_key IS NULL OR (
       ${order.window(first)}
       AND NOT ${ahead("c")}))
   ORDER BY ${order.by}
   LIMIT ${limit}
   FOR UPDATE SKIP LOCKED),
behind AS (
  SELECT h.id AS head, f.id, f.ready,
         row_number() OVER (PARTITION BY h.id ORDER BY f.id) AS position
    FROM heads h
   CROSS JOIN LATERAL (
     SELECT n.id, (${ready("n")}) AS ready FROM ${outbox} n
      WHERE n.ordering_key = h.ordering_key AND n.id > h.id AND ${open("n")}
      ORDER BY n.id
      LIMIT least($6 - 1, ${limit} - (SELECT count(*) FROM heads))) f
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
   LIMIT ${limit}),
locked AS (
  SELECT q.id FROM ${outbox} q
   WHERE q.id = ANY(ARRAY(SELECT p.id FROM picked p WHERE p.position > 0)) AND ${open("q")}
   FOR UPDATE SKIP LOCKED),
gaps AS MATERIALIZED (
  SELECT p.head, min(p.position) AS position FROM picked p
   WHERE p.position > 0 AND p.id NOT IN (SELECT l.id FROM locked l)
   GROUP BY p.head),
chosen AS (
  SELECT p.id, p.position FROM picked p LEFT JOIN gaps g ON g.head = p.head
   WHERE p.position = 0 OR g.position IS NULL OR p.position < g.position)
${update}`
}

export const migration: Migration = {
  version: 12,
  name: "keyed runs in the outbox claim, give-backs of unstarted messages",
  statements: (t) => [
    `CREATE FUNCTION ${t("outbox_claim")}(text, integer, double precision, text[], integer, integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    topic text, ordering_key text, payload jsonb, headers jsonb, created_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
BEGIN
RETURN QUERY
${claimQuery(t)};
END
$claim$`,
    ...(["outbox", "inbox"] as const).map((queue) =>
      `CREATE FUNCTION ${t(`${queue}_give_back_unstarted_many`)}(p_ids bigint[], p_fences jsonb)
  RETURNS SETOF text
  LANGUAGE plpgsql
AS $write$
BEGIN
RETURN QUERY
UPDATE ${t(queue)} q SET claimed_until = NULL, attempt_count = greatest(q.attempt_count - 1, 0)
 WHERE q.id = ANY(p_ids) AND p_fences -> q.id::text = jsonb_build_array(q.claimed_by, q.claim_generation)
   AND q.claimed_until IS NOT NULL AND q.${queue === "outbox" ? "projected_at" : "processed_at"} IS NULL
   AND q.dead_at IS NULL
RETURNING q.id::text;
END
$write$`
    )
  ]
}
