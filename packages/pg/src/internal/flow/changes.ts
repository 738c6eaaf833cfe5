/**
 * How a change of limits is applied: under the lock every claim of the queue takes shared, so
 * no claim is under way while a limit changes; what is in flight is recorded afresh under the
 * new limit's capacity slots, and a changed rate keeps the tokens its buckets hold (at most the
 * new burst). The topic's and the consumer's changes share each step.
 */
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import type { Settings } from "../../DurableConfig.js"
import * as Lifecycle from "../queue/lifecycle.js"
import { specFor } from "../queue/spec.js"
import { slotCount } from "./capacity.js"
import { type Limits, limitsLock, TOPIC_LIMITS } from "./limits.js"
import { bucket, groupRate, ownRate, type RateColumn } from "./rates.js"

export type LimitChanges = ReturnType<typeof make>

export const make = (sql: SqlClient.SqlClient, settings: Settings) => {
  const t = settings.table
  const limitsTable = sql.literal(t("flow_limits"))
  const groupsTable = sql.literal(t("flow_group_limits"))
  const flowClaims = sql.literal(t("flow_claims"))
  const outbox = sql.literal(t("outbox"))
  const buckets = sql.literal(t("flow_group_buckets"))
  const spec = specFor(settings, "outbox")
  // In flight: claimed, its lease running (the claim reads the same from each recorded capacity).
  const claimed = sql.literal(Lifecycle.make(spec).is.claimed)

  const inbox = sql.literal(t("inbox"))
  const inboxLimitsTable = sql.literal(t("inbox_limits"))
  const inboxClaims = sql.literal(t("inbox_flow_claims"))
  const inboxClaimed = sql.literal(Lifecycle.make(specFor(settings, "inbox")).is.claimed)
  type Fragment = typeof inboxClaimed

  /** The lock every claim of `limits` holds shared, taken exclusive: no such claim is under way. */
  const noClaimsOf = (limits: Limits) => sql`SELECT pg_advisory_xact_lock(${sql.literal(limitsLock(t, limits))})`
  /**
   * Makes sure `key` has its row in `limits` (a topic's, a consumer's), under the lock every
   * claim of them takes shared: a claim that began before it has committed, and what it
   * claimed is recorded as taken (`record`).
   */
  const limitedBy = <E, R>(limits: Limits, key: string, by: string, record: Effect.Effect<unknown, E, R>) =>
    Effect.gen(function*() {
      yield* noClaimsOf(limits)
      const column = sql.literal(limits.key)
      const created = yield* sql`INSERT INTO ${sql.literal(t(limits.table))} (${column}, updated_by)
                                 VALUES (${key}, ${by}) ON CONFLICT (${column}) DO NOTHING RETURNING ${column}`
      if (created.length === 0) return
      yield* record
    })
  /**
   * The capacity slot (migration 27) of each of the rows `order` numbers, under an in-flight
   * limit `max`: round robin, so what is in flight, up to the limit, stays within every
   * slot's share. Without a limit: slot 0.
   */
  const slotOf = (max: number | null, order: string) =>
    sql.literal(max === null ? "0" : `(row_number() OVER (ORDER BY ${order}) - 1) % ${slotCount(String(max))}`)
  /**
   * What a queue's limited key (a topic, a consumer) has in flight, recorded as its claim rows
   * under a limit of `max`, exact while the lock is held (`by`: the columns a row is recorded
   * by, the key first). `afresh` drops the rows it had first: they only ever overstated, and
   * recorded again under the limit's slots, none starts past its share while what is in
   * flight fits (a limit lowered below it still puts them past).
   */
  const inFlightOf = (claims: Fragment, queue: Fragment, by: string, inFlight: Fragment) => {
    const columns = sql.literal(by)
    const key = sql.literal(by.split(",")[0]!)
    const record = (value: string, max: number | null) =>
      sql`INSERT INTO ${claims} (${columns}, slot, entries, generations, taken)
          SELECT ${columns}, slot, array_agg(id), array_agg(claim_generation), count(*) FROM (
            SELECT ${columns}, id, claim_generation, ${slotOf(max, "id")} AS slot FROM ${queue}
             WHERE ${key} = ${value} AND ${inFlight}) r
           GROUP BY ${columns}, slot`
    return {
      record,
      afresh: (value: string, max: number | null) =>
        Effect.andThen(sql`DELETE FROM ${claims} WHERE ${key} = ${value}`, record(value, max))
    }
  }
  const topicInFlight = inFlightOf(flowClaims, outbox, "topic, group_key", claimed)
  const consumerInFlight = inFlightOf(inboxClaims, inbox, "consumer", inboxClaimed)
  /** `topic`'s limit is set: what it has in flight is recorded afresh under the new limit's slots. */
  const limitedAfresh = (topic: string, by: string, max: number | null) =>
    Effect.gen(function*() {
      yield* limitedBy(TOPIC_LIMITS, topic, by, Effect.void)
      yield* topicInFlight.afresh(topic, max)
    })

  /**
   * Changes the rate of `key`'s own bucket in `limits` (`change`, under the lock `limitedBy`
   * took): the bucket is first brought to now at the old rate, then holds at most the new
   * burst; a new rate starts full.
   */
  const rebucketOwn = <A, E, R>(limits: Limits, key: string, change: Effect.Effect<A, E, R>) =>
    Effect.gen(function*() {
      const table = sql.literal(t(limits.table))
      const column = sql.literal(limits.key)
      yield* sql`UPDATE ${table} l
                    SET tokens = ${sql.literal(bucket(t, "l", ownRate, "clock_timestamp()"))},
                        tokens_at = clock_timestamp()
                  WHERE l.${column} = ${key} AND l.rate_limit IS NOT NULL`
      const result = yield* change
      yield* sql`UPDATE ${table}
                    SET tokens = CASE WHEN rate_limit IS NOT NULL THEN least(coalesce(tokens, rate_burst), rate_burst) END,
                        tokens_at = CASE WHEN rate_limit IS NOT NULL THEN coalesce(tokens_at, clock_timestamp()) END
                  WHERE ${column} = ${key}`
      return result
    })

  // A group's rate, its own or the topic's per-group one (`b`: its bucket row, `l`: the topic's limits).
  const groupRateOf = (c: RateColumn) => groupRate(c, "o", "l", "b")
  const groupBuckets = sql.literal(
    `SELECT b.topic, b.group_key, ${bucket(t, "b", groupRateOf, "clock_timestamp()")} AS tokens, ${
      groupRateOf("burst")
    } AS burst
      FROM ${t("flow_group_buckets")} b JOIN ${t("flow_limits")} l ON l.topic = b.topic
      LEFT JOIN ${t("flow_group_limits")} o ON o.topic = b.topic AND o.group_key = b.group_key`
  )

  /**
   * Changes a topic's rates (`change`, under the lock `limited` took): its buckets are first
   * brought to now at the old rates, then hold at most the new bursts; a new rate starts full.
   */
  const rebucket = <A, E, R>(topic: string, change: Effect.Effect<A, E, R>) =>
    rebucketOwn(
      TOPIC_LIMITS,
      topic,
      Effect.gen(function*() {
        yield* sql`WITH settled AS (${groupBuckets} WHERE b.topic = ${topic})
                   UPDATE ${buckets} b SET tokens = s.tokens, tokens_at = clock_timestamp()
                     FROM settled s WHERE b.topic = s.topic AND b.group_key = s.group_key`
        const result = yield* change
        // A bucket without a rate now is gone; one above its new burst holds the burst.
        yield* sql`WITH settled AS (${groupBuckets} WHERE b.topic = ${topic}),
                        gone AS (DELETE FROM ${buckets} b USING settled s
                                  WHERE b.topic = s.topic AND b.group_key = s.group_key AND s.burst IS NULL)
                   UPDATE ${buckets} b SET tokens = s.burst
                     FROM settled s WHERE b.topic = s.topic AND b.group_key = s.group_key AND b.tokens > s.burst`
        return result
      })
    )

  return {
    tables: { limitsTable, groupsTable, flowClaims, buckets, inboxLimitsTable, inboxClaims },
    noClaimsOf,
    limitedBy,
    topicInFlight,
    consumerInFlight,
    limitedAfresh,
    rebucketOwn,
    rebucket
  }
}
