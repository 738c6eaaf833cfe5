/**
 * Version 18, released: never edit it (a test holds its text); add the next version instead.
 *
 * Rate limits in the outbox claim: a token bucket per topic and per group, on the database's
 * clock. A topic's bucket holds up to `rate_burst` tokens and refills continuously at
 * `rate_limit` per `rate_period` seconds; each message a claim takes spends one. So in any
 * span of time `d` a topic's claims take at most `burst + limit * d / period` messages,
 * whatever the number of workers. A group's bucket is the same per group (the topic's
 * `group_rate_*` for every named group, a group's own in `flow_group_limits`).
 *
 * The buckets live beside the limits they belong to, and are read and spent by the limited
 * claim of version 17 while it holds the topic's limit row: one claim of the topic at a time,
 * so no two claims spend the same token. Its clock is `clock_timestamp()` read after that lock
 * (a claim that waited for it does not spend tokens at the time it began waiting). A group's
 * bucket is a row only while it is not full (`flow_group_buckets`; no row: full): each claim
 * drops the rows of its topics that have filled up again.
 *
 * A topic with only a rate is a limited topic like any other (its claims take turns, its
 * leases are not renewed once they ran out).
 *
 * The renewal rule of version 17 is tightened (found by the chaos schedule with limits, through
 * PgBouncer, on a loaded machine: 54 in flight against 48). It compared the lease with
 * `now()`, the time its statement *began*: a renewal that began before its lease ran out but
 * ran after it — its backend starved of CPU, its statement queued — renewed a lease whose
 * capacity a claim had meanwhile given to another message. A renewal of a limited topic now
 * compares with `clock_timestamp()`, the time it looks at the row, and asks for a margin of a
 * sixth of the lease: a renewal that looked in time but committed after a claim had already
 * counted the lease as run out would need its commit to take that long. The new lease runs
 * from the clock too. A healthy holder renews every third of its lease, far inside the margin.
 */
import type { Migration } from "../../Migrations.js"
import { claimFunction, type LaterClaim, type Limits, renewable, renewManyFunction } from "./0017_flow_limits.js"

/**
 * What a lease renewal of the outbox asks since this version (`lease`: the new lease's seconds,
 * an SQL expression): the lease still runs, by the clock, a sixth of a lease from now (at least
 * a second: a renewal asking for a tiny lease does not shrink the margin) — or the topic has no
 * limits.
 */
export const renewableInTime = (t: (table: string) => string, q: string, lease: string, limits?: Limits) =>
  renewable(t, q, `clock_timestamp() + make_interval(secs => greatest(${lease} / 6, 1))`, limits)

/** A rate's columns (`prefix`: '' for a topic's own, `group_` for its groups'), as ALTER TABLE clauses. */
export const rateColumns = (prefix: string) => [
  `ADD COLUMN ${prefix}rate_limit integer CHECK (${prefix}rate_limit > 0)`,
  `ADD COLUMN ${prefix}rate_period double precision CHECK (${prefix}rate_period > 0)`,
  `ADD COLUMN ${prefix}rate_burst integer CHECK (${prefix}rate_burst > 0)`,
  `ADD CONSTRAINT ${prefix}rate_whole CHECK (
     (${prefix}rate_limit IS NULL) = (${prefix}rate_period IS NULL) AND (${prefix}rate_limit IS NULL) = (${prefix}rate_burst IS NULL))`
]

/**
 * The tokens a bucket holds at `at` (NULL: no rate): what it held at `tokens_at`, plus the
 * refill since, at most its burst. A bucket never written is full.
 */
export const tokensFunction = (t: (table: string) => string) =>
  `CREATE FUNCTION ${
    t("flow_tokens")
  }(tokens double precision, tokens_at timestamptz, rate_limit integer, rate_period double precision,
    rate_burst integer, at timestamptz)
  RETURNS double precision
  LANGUAGE sql IMMUTABLE
AS $tokens$
SELECT CASE WHEN rate_limit IS NOT NULL THEN least(rate_burst::double precision, coalesce(
  tokens + greatest(extract(epoch FROM at - tokens_at)::double precision, 0) * rate_limit / rate_period,
  rate_burst)) END
$tokens$`

/** A group's rate: its own where it has one, else the topic's per-group rate (named groups only). */
export const groupRate = (column: "limit" | "period" | "burst", own = "o", topic = "l", group = "g") =>
  `CASE WHEN ${own}.rate_limit IS NOT NULL THEN ${own}.rate_${column} WHEN ${group}.group_key <> '' THEN ${topic}.group_rate_${column} END`

/** The tokens of the bucket `state` (its rate: `rate`) at `at` (the claim's clock by default). */
export const bucket = (
  t: (table: string) => string,
  state: string,
  rate: (column: "limit" | "period" | "burst") => string,
  at = "clk"
) =>
  `${t("flow_tokens")}(${state}.tokens, ${state}.tokens_at, ${rate("limit")}, ${rate("period")}, ${
    rate("burst")
  }, ${at})`

/** A topic's own rate (its limits row `l`). */
export const topicRate = (c: "limit" | "period" | "burst") => `l.rate_${c}`

/**
 * This version's outbox claim; versions 20 to 22 re-create it with what they change (`later`:
 * the last step by id, due order, the capacities' prune by id).
 */
export const claimWithRates = (t: (table: string) => string, later?: LaterClaim) =>
  claimFunction(
    t,
    {
      declare: "\n  clk timestamptz;",
      afterLock: `
-- The buckets' clock: after the lock, so a claim that waited for it does not spend at the time it began.
clk := clock_timestamp();
-- A group's bucket that has filled up again (or lost its rate) is no row: dropped.
DELETE FROM ${t("flow_group_buckets")} b
 WHERE b.topic = ANY(limited) AND NOT EXISTS (
   SELECT 1 FROM ${t("flow_limits")} l
     LEFT JOIN ${t("flow_group_limits")} o ON o.topic = l.topic AND o.group_key = b.group_key
    WHERE l.topic = b.topic
      AND ${bucket(t, "b", (c) => groupRate(c, "o", "l", "b"))} < ${groupRate("burst", "o", "l", "b")});`,
      open: ` AND (l.rate_limit IS NULL OR ${bucket(t, "l", topicRate)} >= 1)`,
      topicColumns: `, ${bucket(t, "l", topicRate)} AS tokens,
         l.group_rate_limit, l.group_rate_period, l.group_rate_burst`,
      topicFree: (free) => `least(${free}, floor(l.tokens)::integer)`,
      groupColumns: `,
             ${bucket(t, "u", (c) => groupRate(c))} AS tokens`,
      groupJoins: `
        LEFT JOIN ${t("flow_group_buckets")} u ON u.topic = g.topic AND u.group_key = g.group_key`,
      groupFree: ", floor(g.tokens)::integer",
      quotaColumns: ", g.tokens",
      spend: `
spent AS (
  -- Each group with a rate spends a token per message taken.
  INSERT INTO ${t("flow_group_buckets")} (topic, group_key, tokens, tokens_at)
  SELECT q.topic, q.group_key, q.tokens - count(*), clk
    FROM locked k JOIN quota q ON q.topic = k.topic AND q.group_key = k.group_key
   WHERE q.tokens IS NOT NULL
   GROUP BY q.topic, q.group_key, q.tokens
  ON CONFLICT (topic, group_key) DO UPDATE SET tokens = excluded.tokens, tokens_at = excluded.tokens_at),`,
      ticked: `ticked AS (
  -- The topic's virtual time moves on; a topic with a rate spends a token per message taken.
  UPDATE ${t("flow_limits")} l
     SET vclock = greatest(l.vclock, coalesce(k.now, l.vclock)),
         tokens = CASE WHEN m.tokens IS NULL THEN l.tokens ELSE m.tokens - coalesce(s.n, 0) END,
         tokens_at = CASE WHEN m.tokens IS NULL THEN l.tokens_at ELSE clk END
    FROM lim m
    LEFT JOIN clock k ON k.topic = m.topic
    LEFT JOIN (SELECT x.topic, count(*) AS n FROM locked x GROUP BY x.topic) s ON s.topic = m.topic
   WHERE l.topic = m.topic AND (l.vclock < k.now OR s.n > 0))`
    },
    later
  )

export const migration: Migration = {
  version: 18,
  name: "rate limits in the outbox claim",
  statements: (t) => [
    `ALTER TABLE ${t("flow_limits")}
       ${[...rateColumns(""), ...rateColumns("group_")].join(",\n       ")},
       ADD COLUMN tokens double precision,
       ADD COLUMN tokens_at timestamptz`,
    `ALTER TABLE ${t("flow_group_limits")}
       ${rateColumns("").join(",\n       ")}`,
    `CREATE TABLE ${t("flow_group_buckets")} (
        topic text NOT NULL,
        group_key text NOT NULL,
        tokens double precision NOT NULL,
        tokens_at timestamptz NOT NULL,
        PRIMARY KEY (topic, group_key)
      )`,
    tokensFunction(t),
    claimWithRates(t),
    renewManyFunction(t, renewableInTime(t, "q", "p_lease_seconds"), "clock_timestamp()")
  ]
}
