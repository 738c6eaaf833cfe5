/**
 * Token buckets on the database's clock, as the claim spends them: a bucket holds at most its
 * burst and refills continuously at `limit` per `period` seconds (`flow_tokens`). The formula
 * a topic's, a group's and a consumer's bucket share, and the wait until a rated topic's next
 * token, for the worker that sleeps until then instead of polling.
 */
import { takenBy } from "./capacity.js"
import { type Tables, TOPIC_LIMITS } from "./limits.js"

export type RateColumn = "limit" | "period" | "burst"

/** The tokens of the bucket `state` (its rate: `rate`) at `at`. */
export const bucket = (t: Tables, state: string, rate: (column: RateColumn) => string, at: string) =>
  `${t("flow_tokens")}(${state}.tokens, ${state}.tokens_at, ${rate("limit")}, ${rate("period")}, ${
    rate("burst")
  }, ${at})`

/** A topic's own rate, or a consumer's (its limits row `l`). */
export const ownRate = (c: RateColumn) => `l.rate_${c}`

/** A group's rate: its own (`own`) where it has one, else the topic's (`topic`) per-group rate (named groups only). */
export const groupRate = (column: RateColumn, own: string, topic: string, group: string) =>
  `CASE WHEN ${own}.rate_limit IS NOT NULL THEN ${own}.rate_${column} WHEN ${group}.group_key <> '' THEN ${topic}.group_rate_${column} END`

/** A group's rate as three columns (`rate_limit`, `rate_period`, `rate_burst`), one per line after `indent`. */
export const groupRateColumns = (own: string, topic: string, group: string, indent: string) =>
  (["limit", "period", "burst"] as const).map((c) => `${groupRate(c, own, topic, group)} AS rate_${c}`).join(
    `,\n${indent}`
  )

/** Seconds until a bucket holding `tokens` has one again (zero when it has one now). */
const untilToken = (tokens: string, limit: string, period: string) =>
  `CASE WHEN ${tokens} < 1 THEN (1 - ${tokens}) * ${period} / ${limit} ELSE 0 END`

/**
 * The seconds until a rated topic with a ready message, not paused and not at its in-flight
 * limit, could be claimed again: the later of its own
 * bucket's next token and its groups' — zero when a ready message's group has no empty bucket,
 * else the soonest next token of the empty buckets with a ready message. The soonest topic wins.
 * `readyIn(alias)`: that the outbox row `alias` is ready. The caller appends its topic filter.
 */
export const rateWaitQuery = (t: Tables, readyIn: (alias: string) => string) => {
  const at = "clock_timestamp()"
  const outbox = t("outbox")
  // A group's bucket (`b`, a row only while not full) with its own rate (`o`) and the tokens it holds now.
  const groupBuckets = `${t("flow_group_buckets")} b
                   LEFT JOIN ${t("flow_group_limits")} o ON o.topic = b.topic AND o.group_key = b.group_key`
  const rateOfGroup = (c: RateColumn) => groupRate(c, "o", "l", "b")
  const groupTokens = bucket(t, "b", rateOfGroup, at)
  const emptyGroup = (alias: string) =>
    `EXISTS (SELECT 1 FROM ${groupBuckets}
                WHERE b.topic = ${alias}.topic AND b.group_key = ${alias}.group_key AND ${groupTokens} < 1)`
  return `
      SELECT min(greatest(
               coalesce(${untilToken(bucket(t, "l", ownRate, at), "l.rate_limit", "l.rate_period")}, 0),
               CASE WHEN EXISTS (SELECT 1 FROM ${outbox} r WHERE r.topic = l.topic AND ${readyIn("r")}
                                   AND NOT ${emptyGroup("r")}) THEN 0
               ELSE coalesce((
                 SELECT min(${untilToken(groupTokens, rateOfGroup("limit"), rateOfGroup("period"))})
                   FROM ${groupBuckets}
                  WHERE b.topic = l.topic AND EXISTS (
                    SELECT 1 FROM ${outbox} g WHERE g.topic = b.topic AND g.group_key = b.group_key AND ${
    readyIn("g")
  })), 0) END
             )) AS seconds
        FROM ${t("flow_limits")} l
       WHERE (l.rate_limit IS NOT NULL OR l.group_rate_limit IS NOT NULL
              OR EXISTS (SELECT 1 FROM ${
    t("flow_group_limits")
  } o WHERE o.topic = l.topic AND o.rate_limit IS NOT NULL))
         AND l.topic <> ALL(ARRAY(SELECT p.topic FROM ${t("paused_topics")} p))
         AND (l.max_in_flight IS NULL OR ${takenBy(t, TOPIC_LIMITS, "l.topic")} < l.max_in_flight)
         AND EXISTS (SELECT 1 FROM ${outbox} m WHERE m.topic = l.topic AND ${readyIn("m")})`
}
