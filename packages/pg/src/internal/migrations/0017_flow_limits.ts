/**
 * Version 17, released: never edit it (a test holds its text); add the next version instead.
 *
 * Global concurrency limits and fair share over groups, held by the outbox claim itself.
 *
 * - `group_key` on the outbox (enqueue's `group`, '' for none): the unit of a per-group limit
 *   and of fair share (a tenant, a customer). The open messages are indexed by (topic, group,
 *   id): one more index entry per enqueue; the columns a claim writes are not in it, so claims
 *   stay HOT, and a mark leaves it (partial on open messages).
 * - `flow_limits`: per topic, the most messages in flight across every worker
 *   (`max_in_flight`) and the most of one group (`group_max_in_flight`), and the topic's
 *   fair-share virtual time (`vclock`); `flow_group_limits` overrides a group's limit and gives
 *   it a weight (a tier). NULL: no limit.
 * - `flow_leases`: one row per claim of a limited topic, written by the claim in its own
 *   statement — the capacity it took. Whether a capacity is still taken is read from the
 *   claimed row itself (still open, same generation, lease running), so a mark, a release, a
 *   give-back, a cancellation or a lease that ran out returns it with no write of its own,
 *   and each claim prunes the rows that no longer hold one.
 *
 * The claim: with no limit on any topic it may take, it is version 12's query unchanged. With
 * one, it first locks the limits of its topics (`FOR UPDATE`, in name order: claims of one
 * limited topic run one at a time), then counts what is in flight in a statement of its own —
 * a snapshot taken after the lock, so it sees every claim committed before it: two claims
 * never both see the same free capacity (the race of a count read and then acted on). It
 * takes what the limits leave, group by group: each group with ready messages offers its
 * first ones (a key's head only, in id order), ranked by start-time fair queueing — a group's
 * virtual time (`flow_group_state`: what it was served, over its weight) plus its position
 * over its weight — so the least served group goes first and a group with a large backlog
 * does not hold up one with a few (work-conserving weighted round-robin, kept across claims).
 * The topics without limits are then claimed as version 12 does, with what is left of the
 * batch.
 *
 * Setting the first limit of a topic takes the advisory lock every claim takes shared, and
 * records the claims then in flight: no claim that began before the limit escapes its count.
 *
 * A lease renewal (`outbox_renew_many`, replaced) no longer extends a lease that ran out on a
 * limited topic: its capacity may already be another claim's (found by the chaos schedule
 * with limits: a worker stopped past its lease renewed it on waking, 10 in flight against 8).
 */
import type { Migration } from "../../Migrations.js"
import { fenced, type QueueTable } from "./0010_fenced_batch_writes.js"
import { aheadInKey, claimConditions, type ClaimOrder, claimQuery, claimUpdate, idOrder } from "./0012_keyed_runs.js"

/**
 * What a lease renewal of the outbox also asks since this version: a lease that ran out on a
 * limited topic stays out (its capacity may have gone to another claim; extending it again
 * would put one more in flight than the limit). Elsewhere a holder late by a stall keeps its
 * message if nobody claimed it meanwhile, as before.
 */
export const renewable = (t: (table: string) => string, q: string, until = "now()", limits: Limits = TOPIC_LIMITS) =>
  `(${q}.claimed_until > ${until} OR NOT EXISTS (SELECT 1 FROM ${
    t(limits.table)
  } l WHERE l.${limits.key} = ${q}.${limits.key}))`

/** Where a queue's limits are rows: the table and the column a row of the queue names them by. */
export interface Limits {
  readonly table: string
  readonly key: string
}

/** The outbox's limits, per topic (this version). */
export const TOPIC_LIMITS: Limits = { table: "flow_limits", key: "topic" }

/**
 * The outbox's batch renewal: `rule` is what a row must also meet (this version: `renewable`),
 * `from` the time the new lease runs from (this version: `now()`). Version 18 passes its own;
 * version 25 writes the inbox's (`queue`).
 */
export const renewManyFunction = (
  t: (table: string) => string,
  rule: string = renewable(t, "q"),
  from = "now()",
  queue: QueueTable = { name: "outbox", done: "projected_at" }
) =>
  `CREATE OR REPLACE FUNCTION ${
    t(`${queue.name}_renew_many`)
  }(p_ids bigint[], p_fences jsonb, p_lease_seconds double precision)
  RETURNS SETOF text
  LANGUAGE plpgsql
AS $write$
BEGIN
RETURN QUERY
UPDATE ${t(queue.name)} q SET claimed_until = ${from} + make_interval(secs => p_lease_seconds)
 WHERE ${fenced(queue)} AND ${rule}
RETURNING q.id::text;
END
$write$`

/** The advisory lock (two-key form, its own key space) a claim takes shared and a new limit exclusive. */
export const limitsLock = (t: (table: string) => string, limits: Limits = TOPIC_LIMITS) =>
  `'${t(limits.table)}'::regclass::oid::integer, 17`

/**
 * What a later version adds to this version's limited claim (version 18: token buckets). Each
 * part is empty here, so this version's text stays what was released.
 */
export interface ClaimExtensions {
  /** Declarations of the claim function. */
  readonly declare: string
  /** Statements run once the limits are locked. */
  readonly afterLock: string
  /** A condition over a topic's limits `l`: the claim may take any of it (beside its in-flight limit). */
  readonly open: string
  /** Columns of `lim` (the topic's limits `l`) after its own. */
  readonly topicColumns: string
  /** What the topic can take, given what its in-flight limit leaves (`free`); `l` is `lim`. */
  readonly topicFree: (free: string) => string
  /** Columns and joins of a group's limits (`g` grouped, `l` lim, `o` its own limits). */
  readonly groupColumns: string
  readonly groupJoins: string
  /** More bounds on what a group `g` may take (`, expr` each). */
  readonly groupFree: string
  /** Columns `quota` passes on from `g`. */
  readonly quotaColumns: string
  /** CTEs written after the claim's rows are locked (each ending in a comma). */
  readonly spend: string
  /** The CTE that moves the topics' virtual time (`ticked`). */
  readonly ticked: string
}

const ticked = (t: (table: string) => string) =>
  `ticked AS (
  UPDATE ${t("flow_limits")} l SET vclock = k.now FROM clock k WHERE l.topic = k.topic AND l.vclock < k.now)`

const released = (t: (table: string) => string): ClaimExtensions => ({
  declare: "",
  afterLock: "",
  open: "",
  topicColumns: "",
  topicFree: (free) => free,
  groupColumns: "",
  groupJoins: "",
  groupFree: "",
  quotaColumns: "",
  spend: "",
  ticked: ticked(t)
})

/**
 * The claim of the limited topics (`limited`: their names). Its shapes hold whatever the
 * statistics say: named groups through the group index (the partial index's condition is
 * written out), rows updated by primary key (a plan seen on a table not analyzed yet scanned
 * every open message to join a handful).
 */
const limitedClaim = (
  t: (table: string) => string,
  x: ClaimExtensions,
  order: ClaimOrder,
  named: string,
  ahead: (c: string) => string,
  capacity: Capacity
) => {
  const outbox = t("outbox")
  const { open, ready } = claimConditions(t)
  const keyHead = (c: string) => `(${c}.ordering_key IS NULL OR NOT ${ahead(c)})`
  return `WITH RECURSIVE
lim AS (
  SELECT l.topic, l.max_in_flight, l.group_max_in_flight${x.topicColumns} FROM ${
    t("flow_limits")
  } l WHERE l.topic = ANY(limited)),
busy AS (
  ${capacity.busy}),
topic_free AS (
  SELECT l.topic, ${
    x.topicFree(`CASE WHEN l.max_in_flight IS NULL THEN $2
    ELSE greatest(l.max_in_flight - coalesce((SELECT sum(b.n) FROM busy b WHERE b.topic = l.topic), 0), 0)::integer END`)
  } AS free
    FROM lim l),
named AS (
  (SELECT o.topic, o.group_key FROM ${outbox} o
    WHERE o.topic = ANY(limited) AND ${named} AND ${open("o")}
    ORDER BY o.topic, o.group_key LIMIT 1)
  UNION ALL
  SELECT n.topic, n.group_key FROM named g CROSS JOIN LATERAL (
    SELECT o.topic, o.group_key FROM ${outbox} o
     WHERE o.topic = ANY(limited) AND ${named} AND ${open("o")} AND (o.topic, o.group_key) > (g.topic, g.group_key)
     ORDER BY o.topic, o.group_key LIMIT 1) n),
grouped AS (
  SELECT g.topic, g.group_key FROM named g
  UNION ALL
  SELECT l.topic, '' FROM lim l),
quota AS (
  SELECT g.topic, g.group_key, s.vtime, coalesce(o.weight, 1) AS weight${x.quotaColumns},
         least(tf.free, $2, CASE WHEN g.cap IS NULL THEN $2 ELSE greatest(g.cap - coalesce(b.n, 0), 0)::integer END${x.groupFree}) AS free
    FROM (
      -- A group's own limit, else the topic's per-group one (messages without a group: none).
      SELECT g.topic, g.group_key, coalesce(o.max_in_flight, CASE WHEN g.group_key <> '' THEN l.group_max_in_flight END) AS cap${x.groupColumns}
        FROM grouped g JOIN lim l ON l.topic = g.topic
        LEFT JOIN ${t("flow_group_limits")} o ON o.topic = g.topic AND o.group_key = g.group_key${x.groupJoins}) g
    JOIN topic_free tf ON tf.topic = g.topic
    LEFT JOIN busy b ON b.topic = g.topic AND b.group_key = g.group_key
    LEFT JOIN ${t("flow_group_limits")} o ON o.topic = g.topic AND o.group_key = g.group_key
    LEFT JOIN ${t("flow_group_state")} s ON s.topic = g.topic AND s.group_key = g.group_key),
candidates AS (
  -- Each group's first ready messages, in id order through the group index.
  SELECT c.id, c.topic, c.generation, q.group_key, q.vtime, q.weight,
         row_number() OVER (PARTITION BY q.topic, q.group_key ORDER BY ${order.by}) AS nth
    FROM quota q CROSS JOIN LATERAL (
      SELECT c.id, c.topic, c.claim_generation AS generation${order.columns} FROM ${outbox} c
       WHERE c.topic = q.topic AND c.group_key = q.group_key AND ${open("c")} AND ${ready("c")} AND ${keyHead("c")}
       ORDER BY c.topic, c.group_key, ${order.by} LIMIT q.free) c
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
  SELECT q.id, q.topic, q.group_key, q.claim_generation FROM ${outbox} q
   WHERE q.id = ANY(ARRAY(SELECT f.id FROM fitting f)) AND ${open("q")}
   FOR UPDATE SKIP LOCKED),
leased AS (
  ${capacity.record}),
served AS (
  -- Each group that offered keeps its place; one served moves on by what it took over its weight.
  INSERT INTO ${t("flow_group_state")} (topic, group_key, vtime)
  SELECT o.topic, o.group_key,
         greatest(min(o.start), max(o.rank) FILTER (WHERE o.id IN (SELECT l.id FROM locked l)))
    FROM offered o GROUP BY 1, 2
  ON CONFLICT (topic, group_key) DO UPDATE SET vtime = excluded.vtime),${x.spend}
${x.ticked}
${
    // Heads only: position 0.
    claimUpdate(t, { from: "", where: "q.id = ANY(ARRAY(SELECT l.id FROM locked l))", position: "0" })}`
}

/** What later versions change in the whole claim function (each left out: this version's). */
export interface LaterClaim {
  /** The last step of its claims of topics without limits (version 20: by id). */
  readonly update?: string
  /** The order it takes messages in (version 21: by due time). */
  readonly order?: ClaimOrder
  /**
   * That the capacity row `f` of `flow_leases` is still taken (version 22: a probe by id). This
   * version: a NOT EXISTS over the outbox.
   */
  readonly held?: (f: string) => string
  /**
   * Which of a limited topic's open messages `o` have a named group (this version:
   * `o.group_key <> ''`, which no index bounds: the claim read the topic's whole backlog of
   * messages without a group to find none; version 23: `o.group_key > ''`, the same rows, as
   * '' sorts before every other text, bounded by the group index).
   */
  readonly named?: string
  /** That an open message of `c`'s key stands before it (version 24: through the key index). */
  readonly ahead?: (c: string) => string
  /** How the claim keeps what it took (version 26: a row per claim and group, not per message). */
  readonly capacity?: (held: (f: string) => string) => Capacity
  /**
   * A shorter way for a claim of one limited topic that has no groups, rates or weights to tell
   * apart (version 26): the claim of topics without limits, narrowed to it and to what its limit
   * leaves. `claim(also, limit)` writes that claim's query.
   */
  readonly single?: (claim: (also: (c: string) => string, limit: string) => string) => SingleTopicClaim
  /**
   * Statements run before the limits are locked, once the claim knows a limit concerns it
   * (version 27: the claim of one topic with only an in-flight limit takes capacity slots
   * instead, and returns). `claim(also, limit)` writes the claim of topics without limits
   * narrowed; `rest` claims the rest of the batch from the topics without limits.
   */
  readonly unlocked?: (claim: (also: (c: string) => string, limit: string) => string, rest: string) => string
  /**
   * Statements run once the limits are locked, before the extensions' (version 27: every slot
   * locked too; before version 18's clock is read, so a claim that waited for a slot does not
   * spend tokens at the time it began waiting).
   */
  readonly afterLock?: string
  /** Declarations those statements need (`\n  name type;` each). */
  readonly declare?: string
}

/** The claim of one limited topic with nothing but an in-flight limit (see `LaterClaim.single`). */
export interface SingleTopicClaim {
  /** Declarations it needs (`\n  name type;` each). */
  readonly declare: string
  /** When it applies: a condition over `limited`, once its limits are locked and counted. */
  readonly when: string
  /** Its statements: the last one returns the claimed rows (`RETURN QUERY ...;`). */
  readonly statements: string
}

/** How a limited claim keeps the capacity it took, and reads what its topics have in flight. */
export interface Capacity {
  /** Statements run once the limits are locked: drop (or recount) what is no longer taken. */
  readonly prune: string
  /** The query of the `busy` CTE: `topic, group_key, n` in flight per group of `limited`. */
  readonly busy: string
  /** What the topic `l` has in flight, an SQL expression (the claim's "at the limit" test). */
  readonly inFlight: (l: string) => string
  /** The body of the `leased` CTE: records what `locked` took. */
  readonly record: string
}

/** This version's capacity: a row of `flow_leases` per message, each probed at every claim (`held`). */
export const capacityPerMessage = (t: (table: string) => string) => (held: (f: string) => string): Capacity => ({
  prune: `DELETE FROM ${t("flow_leases")} f
 WHERE f.topic = ANY(limited) AND NOT ${held("f")};`,
  busy: `SELECT f.topic, f.group_key, count(*) AS n FROM ${
    t("flow_leases")
  } f WHERE f.topic = ANY(limited) GROUP BY 1, 2`,
  inFlight: (l) => `(SELECT count(*) FROM ${t("flow_leases")} f WHERE f.topic = ${l}.topic)`,
  record: `INSERT INTO ${t("flow_leases")} (id, generation, topic, group_key)
  SELECT l.id, l.claim_generation + 1, l.topic, l.group_key FROM locked l
  ON CONFLICT (id) DO UPDATE SET generation = excluded.generation`
})

/** This version's test of a capacity still taken: its row open, same generation, lease running. */
const heldByAntiJoin = (t: (table: string) => string) => (f: string) =>
  `EXISTS (
   SELECT 1 FROM ${t("outbox")} o
    WHERE ${capacityHeld(t, f)})`

/** The message `o` of the capacity row `f` still holds it: open, same generation, lease running. */
export const capacityHeld = (t: (table: string) => string, f: string) =>
  `o.id = ${f}.id AND o.claim_generation = ${f}.generation AND ${claimConditions(t).open("o")}
      AND o.claimed_until > now()`

/**
 * The outbox claim of this version (`x`: what a later version adds to its limited claim;
 * `later`: what later versions change in the whole function). Its signature is version 12's:
 * processes of every release since call it alike.
 */
export const claimFunction = (
  t: (table: string) => string,
  x: ClaimExtensions = released(t),
  later: LaterClaim = {}
) => {
  const {
    ahead = aheadInKey(t),
    capacity: capacityOf = capacityPerMessage(t),
    held = heldByAntiJoin(t),
    named = "o.group_key <> ''",
    order = idOrder,
    single: singleOf,
    unlocked,
    update = claimUpdate(t)
  } = later
  const capacity = capacityOf(held)
  const narrowed = (also: (c: string) => string, limit: string) => claimQuery(t, also, limit, update, order, ahead)
  const single = singleOf?.(narrowed)
  const rest = `-- The rest of the batch from the topics without limits, if the claim may take any.
IF taken < $2 AND ($4 IS NULL OR EXISTS (
     SELECT 1 FROM unnest($4) x(topic) WHERE NOT EXISTS (SELECT 1 FROM ${
    t("flow_limits")
  } l WHERE l.topic = x.topic))) THEN
  RETURN QUERY
${
    claimQuery(
      t,
      (c) => ` AND ${c}.topic <> ALL(ARRAY(SELECT l.topic FROM ${t("flow_limits")} l))`,
      "($2 - taken)",
      update,
      order,
      ahead
    )
  };
END IF;`
  const limitedPart = `  -- Each group's messages are read in index order until its few are found: a bitmap scan would
  -- read a group's whole backlog and sort it (the plan is made once, under this setting).
  PERFORM set_config('enable_bitmapscan', 'off', true);
  RETURN QUERY
${limitedClaim(t, x, order, named, ahead, capacity)};
  GET DIAGNOSTICS taken = ROW_COUNT;
  PERFORM set_config('enable_bitmapscan', 'on', true);`
  return `CREATE OR REPLACE FUNCTION ${t("outbox_claim")}(text, integer, double precision, text[], integer, integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    topic text, ordering_key text, payload jsonb, headers jsonb, created_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan${order.settings}
AS $claim$
#variable_conflict use_column
DECLARE
  limited text[];
  taken integer;${x.declare}${single?.declare ?? ""}${later.declare ?? ""}
BEGIN
PERFORM pg_advisory_xact_lock_shared(${limitsLock(t)});
IF NOT EXISTS (SELECT 1 FROM ${t("flow_limits")} l WHERE $4 IS NULL OR l.topic = ANY($4)) THEN
  RETURN QUERY
${claimQuery(t, undefined, undefined, update, order, ahead)};
  RETURN;
END IF;
${
    unlocked?.(narrowed, rest) ?? ""
  }-- The limits of this claim's topics, locked in name order: one claim of a limited topic at a time.
limited := ARRAY(
  SELECT l.topic FROM ${t("flow_limits")} l
   WHERE ($4 IS NULL OR l.topic = ANY($4)) AND l.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
   ORDER BY l.topic FOR UPDATE);${later.afterLock ?? ""}${x.afterLock}
-- A new snapshot from here on: every claim committed before the lock is seen. The capacities
-- no longer taken (their row settled, given back, cancelled, its lease run out) are dropped.
${capacity.prune}
-- A group at or behind the topic's virtual time holds nothing a new one would not: forgotten.
DELETE FROM ${t("flow_group_state")} s USING ${t("flow_limits")} l
 WHERE l.topic = ANY(limited) AND s.topic = l.topic AND s.vtime <= l.vclock;
taken := 0;
-- At the limit (what a claim most often finds while the slots are busy): nothing more to read.
IF EXISTS (
  SELECT 1 FROM ${t("flow_limits")} l
   WHERE l.topic = ANY(limited)
     AND (l.max_in_flight IS NULL OR l.max_in_flight > ${capacity.inFlight("l")})${x.open})
THEN
${
    single === undefined ? limitedPart : `  IF ${single.when} THEN
${single.statements}
    GET DIAGNOSTICS taken = ROW_COUNT;
  ELSE
${limitedPart}
  END IF;`
  }
END IF;
${rest}
END
$claim$`
}

export const migration: Migration = {
  version: 17,
  name: "flow limits and fair share in the outbox claim",
  statements: (t) => [
    `ALTER TABLE ${t("outbox")} ADD COLUMN group_key text NOT NULL DEFAULT ''`,
    `CREATE INDEX outbox_open_group_idx ON ${t("outbox")} (topic, group_key, id)
       WHERE projected_at IS NULL AND dead_at IS NULL`,
    `CREATE TABLE ${t("flow_limits")} (
        topic text PRIMARY KEY,
        max_in_flight integer CHECK (max_in_flight > 0),
        group_max_in_flight integer CHECK (group_max_in_flight > 0),
        updated_at timestamptz NOT NULL DEFAULT now(),
        updated_by text NOT NULL,
        vclock float8 NOT NULL DEFAULT 0
      )`,
    `CREATE TABLE ${t("flow_group_limits")} (
        topic text NOT NULL REFERENCES ${t("flow_limits")} (topic) ON DELETE CASCADE,
        group_key text NOT NULL,
        max_in_flight integer CHECK (max_in_flight > 0),
        weight integer NOT NULL DEFAULT 1 CHECK (weight > 0),
        PRIMARY KEY (topic, group_key)
      )`,
    `CREATE TABLE ${t("flow_leases")} (
        id bigint PRIMARY KEY,
        generation bigint NOT NULL,
        topic text NOT NULL,
        group_key text NOT NULL
      )`,
    `CREATE INDEX flow_leases_topic_idx ON ${t("flow_leases")} (topic, group_key)`,
    `CREATE TABLE ${t("flow_group_state")} (
        topic text NOT NULL,
        group_key text NOT NULL,
        vtime float8 NOT NULL,
        PRIMARY KEY (topic, group_key)
      )`,
    renewManyFunction(t),
    claimFunction(t)
  ]
}
