/**
 * An overshoot checker for flow limits (`FlowControl`): a trigger on the outbox that, after
 * every claim of a limited topic (once per claim statement), counts what is in flight for the
 * topic and for each group it claimed from and records every count above its limit. Claims of one limited topic may
 * run at once (capacity slots, migration 27), so before it counts, the trigger takes a lock of
 * its own, held until its claim commits: the checked claims pass it one at a time, each count
 * sees every claim that passed before, and of claims that overlapped, the last to pass counts
 * them all. The claims still decide what to take at once (before the trigger). A lease counts as
 * held by the clock read once the lock is taken, not by `now()`: a claim's transaction may have
 * begun long before it got its locks, and a lease that ran out in between was free capacity for
 * the claims that went first (they counted at their own, later, time). Tests and the
 * chaos suite install it, run their load, then read `overshoots` (0 rows: the limits held).
 *
 * Rates: the trigger also writes down each message claimed on a topic with a rate (its
 * claim's statement start and the time of the claim), and `rateOvershoots` checks every span
 * of them against the token bucket the topic and each group have now: from the i-th claimed
 * message to the j-th, at most `burst + limit * (at_j - start_i) / period`. The bucket's own
 * clock is read between those two times, so the bound is never tighter than the bucket's: an
 * overshoot found is one.
 *
 * The stored inbox's limits (per consumer, migration 25) are checked alike by a trigger on the
 * inbox: its overshoots and rate claims are recorded with `queue: "inbox"` and the consumer as
 * their topic.
 *
 * @since 0.4.0
 */
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { quoteIdentifier } from "./internal/admin.js"

export interface Overshoot {
  /** Which queue's limit: an outbox topic's or a stored-inbox consumer's. */
  readonly queue: "outbox" | "inbox"
  /** The topic (the consumer, for the inbox). */
  readonly topic: string
  /** '' for the topic's own limit; else the group whose limit was passed. */
  readonly group: string
  readonly inFlight: number
  readonly limit: number
}

/**
 * The checker's own lock (two-key advisory form): taken by every checked claim before it counts,
 * held until it commits.
 */
const CHECKER_LOCK = "hashtext('effect-durable flow checker'), 0"

/** The name of `schema`'s inbox limits table (version 25), as an SQL string literal for `to_regclass`. */
const inboxLimitsName = (schema: string) => `'${quoteIdentifier(schema).replaceAll("'", "''")}.inbox_limits'`

/** Installs the checker in `schema` (the substrate's; default `durable`). Idempotent. */
export const install = (schema = "durable") =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const s = quoteIdentifier(schema)
    const statements = [
      `CREATE TABLE IF NOT EXISTS ${s}.flow_overshoots (
        queue text NOT NULL DEFAULT 'outbox', topic text NOT NULL, group_key text NOT NULL, in_flight integer NOT NULL, max_in_flight integer NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp())`,
      `CREATE TABLE IF NOT EXISTS ${s}.flow_rate_claims (
        seq bigserial PRIMARY KEY, queue text NOT NULL DEFAULT 'outbox', topic text NOT NULL, group_key text NOT NULL,
        started timestamptz NOT NULL DEFAULT statement_timestamp(), at timestamptz NOT NULL DEFAULT clock_timestamp())`,
      // Once per claim statement (its rows as transition tables), per topic and group it claimed:
      // a count per row, serialized under the checker's lock, made a loaded 16-worker run wait
      // past the claims' lock timeout.
      `CREATE OR REPLACE FUNCTION ${s}.flow_check() RETURNS trigger LANGUAGE plpgsql AS $check$
      DECLARE
        c record;
        n integer;
        clk timestamptz;
      BEGIN
        FOR c IN
          SELECT k.topic, k.group_key, count(*)::integer AS claimed, l.max_in_flight AS topic_cap,
                 coalesce(g.max_in_flight, CASE WHEN k.group_key <> '' THEN l.group_max_in_flight END) AS group_cap,
                 l.rate_limit IS NOT NULL OR g.rate_limit IS NOT NULL OR (k.group_key <> '' AND l.group_rate_limit IS NOT NULL) AS rated
            FROM (SELECT nw.topic, nw.group_key FROM new_rows nw JOIN old_rows od ON od.id = nw.id
                   WHERE nw.claim_generation <> od.claim_generation AND nw.claimed_until IS NOT NULL) k
            JOIN ${s}.flow_limits l ON l.topic = k.topic
            LEFT JOIN ${s}.flow_group_limits g ON g.topic = k.topic AND g.group_key = k.group_key
           GROUP BY k.topic, k.group_key, l.max_in_flight, l.group_max_in_flight, l.rate_limit, l.group_rate_limit,
                    g.max_in_flight, g.rate_limit
           ORDER BY k.topic, k.group_key
        LOOP
          IF c.topic_cap IS NOT NULL OR c.group_cap IS NOT NULL THEN
            PERFORM pg_advisory_xact_lock(${CHECKER_LOCK});
            clk := clock_timestamp();
          END IF;
          IF c.topic_cap IS NOT NULL THEN
            SELECT count(*) INTO n FROM ${s}.outbox o
             WHERE o.topic = c.topic AND o.projected_at IS NULL AND o.dead_at IS NULL AND o.claimed_until > clk;
            IF n > c.topic_cap THEN
              INSERT INTO ${s}.flow_overshoots (topic, group_key, in_flight, max_in_flight) VALUES (c.topic, '', n, c.topic_cap);
            END IF;
          END IF;
          IF c.group_cap IS NOT NULL THEN
            SELECT count(*) INTO n FROM ${s}.outbox o
             WHERE o.topic = c.topic AND o.group_key = c.group_key AND o.projected_at IS NULL AND o.dead_at IS NULL
               AND o.claimed_until > clk;
            IF n > c.group_cap THEN
              INSERT INTO ${s}.flow_overshoots (topic, group_key, in_flight, max_in_flight)
              VALUES (c.topic, c.group_key, n, c.group_cap);
            END IF;
          END IF;
          IF c.rated THEN
            INSERT INTO ${s}.flow_rate_claims (topic, group_key)
            SELECT c.topic, c.group_key FROM generate_series(1, c.claimed);
          END IF;
        END LOOP;
        RETURN NULL;
      END
      $check$`,
      `CREATE OR REPLACE FUNCTION ${s}.inbox_flow_check() RETURNS trigger LANGUAGE plpgsql AS $check$
      DECLARE
        c record;
        n integer;
        clk timestamptz;
      BEGIN
        FOR c IN
          SELECT k.consumer, count(*)::integer AS claimed, l.max_in_flight AS cap, l.rate_limit IS NOT NULL AS rated
            FROM (SELECT nw.consumer FROM new_rows nw JOIN old_rows od ON od.id = nw.id
                   WHERE nw.claim_generation <> od.claim_generation AND nw.claimed_until IS NOT NULL) k
            JOIN ${s}.inbox_limits l ON l.consumer = k.consumer
           GROUP BY k.consumer, l.max_in_flight, l.rate_limit
           ORDER BY k.consumer
        LOOP
          IF c.cap IS NOT NULL THEN
            PERFORM pg_advisory_xact_lock(${CHECKER_LOCK});
            clk := clock_timestamp();
            SELECT count(*) INTO n FROM ${s}.inbox i
             WHERE i.consumer = c.consumer AND i.processed_at IS NULL AND i.dead_at IS NULL AND i.claimed_until > clk;
            IF n > c.cap THEN
              INSERT INTO ${s}.flow_overshoots (queue, topic, group_key, in_flight, max_in_flight)
              VALUES ('inbox', c.consumer, '', n, c.cap);
            END IF;
          END IF;
          IF c.rated THEN
            INSERT INTO ${s}.flow_rate_claims (queue, topic, group_key)
            SELECT 'inbox', c.consumer, '' FROM generate_series(1, c.claimed);
          END IF;
        END LOOP;
        RETURN NULL;
      END
      $check$`,
      // Tables an earlier install left, from before the inbox was checked.
      `ALTER TABLE ${s}.flow_overshoots ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'outbox'`,
      `ALTER TABLE ${s}.flow_rate_claims ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'outbox'`,
      `DROP TRIGGER IF EXISTS flow_check ON ${s}.outbox`,
      `CREATE TRIGGER flow_check AFTER UPDATE ON ${s}.outbox
        REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION ${s}.flow_check()`,
      // On the inbox only where it has limits (version 25): before that its trigger would fail every claim.
      `DROP TRIGGER IF EXISTS inbox_flow_check ON ${s}.inbox`,
      `DO $install$ BEGIN
        IF to_regclass(${inboxLimitsName(schema)}) IS NOT NULL THEN
          CREATE TRIGGER inbox_flow_check AFTER UPDATE ON ${s}.inbox
            REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION ${s}.inbox_flow_check();
        END IF;
      END $install$`
    ]
    return Effect.forEach(statements, (statement) => sql.unsafe(statement), { discard: true })
  })

/** Every count above its limit the checker saw, oldest first. */
export const overshoots = (schema = "durable") =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.unsafe<Overshoot>(
      `SELECT queue, topic, group_key AS "group", in_flight AS "inFlight", max_in_flight AS "limit"
         FROM ${quoteIdentifier(schema)}.flow_overshoots ORDER BY at`
    ))

export interface RateOvershoot {
  readonly queue: "outbox" | "inbox"
  /** The topic (the consumer, for the inbox). */
  readonly topic: string
  /** '' for the topic's own rate; else the group whose rate was passed. */
  readonly group: string
  /** The most messages claimed above what the bucket allowed, over every span of time. */
  readonly excess: number
}

/**
 * Every topic, group and inbox consumer whose claims took more than their token bucket allows in
 * some span of time (checked against the rates set now: set them before the load and leave them).
 */
export const rateOvershoots = (schema = "durable") =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const s = quoteIdentifier(schema)
    // The inbox's buckets exist from version 25 on.
    const found = yield* sql.unsafe<{ inbox: boolean }>(
      `SELECT to_regclass(${inboxLimitsName(schema)}) IS NOT NULL AS inbox`
    )
    const inboxBuckets = found[0]?.inbox === true
      ? `
        UNION ALL
        SELECT c.seq, c.queue, c.topic, '', c.started, c.at, l.rate_limit / l.rate_period, l.rate_burst
          FROM ${s}.flow_rate_claims c JOIN ${s}.inbox_limits l ON l.consumer = c.topic
         WHERE c.queue = 'inbox' AND l.rate_limit IS NOT NULL`
      : ""
    // For the i-th and j-th claimed message of a bucket (i <= j, in claim order): j - i + 1
    // messages against burst + r * (at_j - started_i), i.e. (j - r at_j) - (i - r started_i) + 1
    // against burst: the least (i - r started_i) so far is a running minimum.
    return yield* sql.unsafe<RateOvershoot>(
      `WITH base AS (SELECT min(started) AS t0 FROM ${s}.flow_rate_claims),
      buckets AS (
        SELECT c.seq, c.queue, c.topic, '' AS group_key, c.started, c.at, l.rate_limit / l.rate_period AS r,
               l.rate_burst AS burst
          FROM ${s}.flow_rate_claims c JOIN ${s}.flow_limits l ON l.topic = c.topic
         WHERE c.queue = 'outbox' AND l.rate_limit IS NOT NULL
        UNION ALL
        SELECT c.seq, c.queue, c.topic, c.group_key, c.started, c.at,
               coalesce(g.rate_limit / g.rate_period, l.group_rate_limit / l.group_rate_period),
               coalesce(g.rate_burst, l.group_rate_burst)
          FROM ${s}.flow_rate_claims c JOIN ${s}.flow_limits l ON l.topic = c.topic
          LEFT JOIN ${s}.flow_group_limits g ON g.topic = c.topic AND g.group_key = c.group_key
         WHERE c.queue = 'outbox' AND c.group_key <> '' AND (g.rate_limit IS NOT NULL OR l.group_rate_limit IS NOT NULL)${inboxBuckets}),
      numbered AS (
        SELECT b.*, row_number() OVER (PARTITION BY b.queue, b.topic, b.group_key ORDER BY b.seq) AS k FROM buckets b),
      spans AS (
        SELECT n.queue, n.topic, n.group_key, n.burst,
               n.k - n.r * extract(epoch FROM n.at - base.t0)::float8 AS hi,
               min(n.k - n.r * extract(epoch FROM n.started - base.t0)::float8)
                 OVER (PARTITION BY n.queue, n.topic, n.group_key ORDER BY n.k ROWS UNBOUNDED PRECEDING) AS lo
          FROM numbered n CROSS JOIN base),
      worst AS (
        SELECT DISTINCT ON (queue, topic, group_key) queue, topic, group_key, hi - lo + 1 - burst AS excess
          FROM spans ORDER BY queue, topic, group_key, hi - lo DESC)
      SELECT queue, topic, group_key AS "group", excess FROM worst WHERE excess > 1e-6 ORDER BY queue, topic, group_key`
    )
  })
