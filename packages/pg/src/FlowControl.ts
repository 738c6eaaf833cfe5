/**
 * Global concurrency limits and fair share for outbox topics, held by the claim itself
 * (migration 17): at most `maxInFlight` messages of a topic in flight across every projector
 * process, at most `groupMaxInFlight` of one group (`Outbox.enqueue(..., { group })`: a
 * tenant, a customer), a group's own limit and weight where it differs (a tier). A claim of a
 * limited topic takes its capacity in its own transaction, after the claims before it
 * committed, so concurrent workers never both use the same free slot; a mark, a release, a
 * give-back, a cancellation or a lease that ran out gives it back. Among the groups with ready
 * messages the least served goes first (in flight + position, over its weight): a group with a
 * large backlog does not hold up one with a few.
 *
 * Rate limits (migration 18) are token buckets on the database's clock, per topic and per
 * group: `{ limit: 10, per: "1 minute" }` lets the topic's claims take at most 10 messages a
 * minute across every worker, `burst` of them at once after a quiet spell (default: `limit`).
 * In any span of time `d` at most `burst + limit * d / per` are claimed.
 *
 * Limits are rows, set and changed at run time (here, the CLI's `limits`, the admin page);
 * every claim reads them. A lowered limit lets the deliveries under way finish; a changed
 * rate keeps the tokens its bucket holds (at most the new burst).
 *
 * A consumer of the stored inbox (`InboxWorker`) can have an in-flight limit and a rate too
 * (`setInboxLimit`, migration 25), held by the inbox claim the same way; the inbox has no
 * groups.
 *
 * @since 0.4.0
 */
import { type DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import { type Limits, limitsLock, TOPIC_LIMITS } from "./internal/migrations/0017_flow_limits.js"
import { bucket, groupRate, topicRate } from "./internal/migrations/0018_rate_limits.js"
import { CONSUMER_LIMITS, heldOfClaim } from "./internal/migrations/0025_inbox_limits.js"
import { stillHeld } from "./internal/migrations/0026_claim_rows.js"
import { slotCount } from "./internal/migrations/0027_capacity_slots.js"
import * as Lifecycle from "./internal/queue/lifecycle.js"
import { specFor } from "./internal/queue/spec.js"
import { decodeRows } from "./internal/rows.js"
import { isoUtc } from "./internal/timestamps.js"

/** The most a limit may allow in flight. */
export const MAX_IN_FLIGHT = 1_000_000
/** The largest weight of a group. */
export const MAX_WEIGHT = 1000
/** The longest period of a rate. */
export const MAX_RATE_PERIOD = "7 days"

/** A token bucket: at most `limit` messages per `per`, `burst` of them at once. */
export interface Rate {
  /** Messages per period (1-1,000,000). */
  readonly limit: number
  /** The period (1 millisecond to 7 days), e.g. `"1 minute"`. */
  readonly per: Duration.Input
  /** The most taken at once after a quiet spell (1-1,000,000; default `limit`). */
  readonly burst?: number
}

/** A rate as set: its period in milliseconds. */
export interface RateLimit {
  readonly limit: number
  readonly perMillis: number
  readonly burst: number
}

export interface GroupLimit {
  readonly group: string
  /** At most this many of the group's messages in flight (`null`: the topic's per-group limit). */
  readonly maxInFlight: number | null
  /** Its share against the other groups of the topic (1 by default). */
  readonly weight: number
  /** The group's own rate (`null`: the topic's per-group rate). */
  readonly rate: RateLimit | null
}

export interface TopicLimit {
  readonly topic: string
  /** At most this many of the topic's messages in flight (`null`: no limit on the topic). */
  readonly maxInFlight: number | null
  /** At most this many of one group's (`null`: no per-group limit). */
  readonly groupMaxInFlight: number | null
  /** The topic's rate (`null`: none). */
  readonly rate: RateLimit | null
  /** Every group's rate (`null`: none). */
  readonly groupRate: RateLimit | null
  /** The tokens the topic's bucket holds now (`null`: no rate): messages a claim could take at once. */
  readonly tokens: number | null
  /** The groups with a limit or weight of their own. */
  readonly groups: ReadonlyArray<GroupLimit>
  /** Messages in flight now (claimed, their lease running). */
  readonly inFlight: number
  /** ISO-8601 UTC. */
  readonly updatedAt: string
  readonly updatedBy: string
}

/** A stored-inbox consumer's limits (`setInboxLimit`). */
export interface InboxLimit {
  readonly consumer: string
  /** At most this many of the consumer's entries in flight (`null`: no limit). */
  readonly maxInFlight: number | null
  /** The consumer's rate (`null`: none). */
  readonly rate: RateLimit | null
  /** The tokens its bucket holds now (`null`: no rate). */
  readonly tokens: number | null
  /** Entries in flight now (claimed, their lease running). */
  readonly inFlight: number
  /** ISO-8601 UTC. */
  readonly updatedAt: string
  readonly updatedBy: string
}

export interface InboxLimitOptions {
  /** At most this many of the consumer's entries in flight (1-1,000,000; `null` or absent: none). */
  readonly maxInFlight?: number | null
  /** The consumer's rate (`null` or absent: none). */
  readonly rate?: Rate | null
  /** Who sets it (1-128 bytes), recorded; default "an operator". */
  readonly by?: string
}

export interface LimitOptions {
  /** At most this many of the topic's messages in flight (1-1,000,000; `null` or absent: none). */
  readonly maxInFlight?: number | null
  /** At most this many of one group's messages in flight (1-1,000,000; `null` or absent: none). */
  readonly groupMaxInFlight?: number | null
  /** The topic's rate (`null` or absent: none). */
  readonly rate?: Rate | null
  /** Each group's rate (`null` or absent: none). */
  readonly groupRate?: Rate | null
  /** Who sets it (1-128 bytes), recorded; default "an operator". */
  readonly by?: string
}

export interface GroupOptions {
  /** The group's own limit (1-1,000,000; `null` or absent: the topic's per-group limit). */
  readonly maxInFlight?: number | null
  /** Its weight (1-1000; default 1): a group of weight 3 gets three slots to another's one. */
  readonly weight?: number
  /** The group's own rate (`null` or absent: the topic's per-group rate). */
  readonly rate?: Rate | null
  readonly by?: string
}

export class FlowControl extends Context.Service<FlowControl, {
  /** Sets (replaces) the limits of a topic; its group settings stay. */
  readonly setLimit: (topic: string, options: LimitOptions) => Effect.Effect<void, InvalidInput | DatabaseError>
  /** Sets one group's own limit and weight (the topic is limited from then on, by its group settings at least). */
  readonly setGroup: (
    topic: string,
    group: string,
    options: GroupOptions
  ) => Effect.Effect<void, InvalidInput | DatabaseError>
  /** Removes every limit of a topic (and its groups' settings). Returns whether it had any. */
  readonly clear: (topic: string) => Effect.Effect<boolean, InvalidInput | DatabaseError>
  /** Every limited topic, with what is in flight now. */
  readonly limits: Effect.Effect<ReadonlyArray<TopicLimit>, DatabaseError>
  /**
   * Sets (replaces) the limits of a stored-inbox consumer: at most `maxInFlight` of its entries
   * claimed through `InboxWorker` at once across every worker, at most `rate` a period. At least
   * one of the two (`clearInbox` removes them).
   */
  readonly setInboxLimit: (
    consumer: string,
    options: InboxLimitOptions
  ) => Effect.Effect<void, InvalidInput | DatabaseError>
  /** Removes a consumer's limits. Returns whether it had any. */
  readonly clearInbox: (consumer: string) => Effect.Effect<boolean, InvalidInput | DatabaseError>
  /** Every limited inbox consumer, with what is in flight now. */
  readonly inboxLimits: Effect.Effect<ReadonlyArray<InboxLimit>, DatabaseError>
}>()("@effect-durable/pg/FlowControl") {}

const decodeTopic = Input.argument("topic", Input.Text(128))
const decodeConsumer = Input.argument("consumer", Input.Text(128))
const decodeGroup = Input.argument("group", Input.Text(128))
const decodeBy = Input.argument("by", Input.Text(128))
const limitOf = (name: string) => Input.argument(name, Schema.NullOr(Input.Count(MAX_IN_FLIGHT)))
const decodeMaxInFlight = limitOf("maxInFlight")
const decodeGroupMaxInFlight = limitOf("groupMaxInFlight")
const decodeWeight = Input.argument("weight", Input.Count(MAX_WEIGHT))

/** Refuses an option this call does not know (a typo must not pass for "no limit"). */
const onlyKnown = (options: object, known: ReadonlyArray<string>, prefix = "options") => {
  const unknown = Object.keys(options).find((key) => !known.includes(key))
  return unknown === undefined
    ? Effect.void
    : Effect.fail(new InvalidInput({ argument: `${prefix}.${unknown}`, rule: `one of ${known.join(", ")}` }))
}

const RateInput = Schema.NullOr(Schema.Struct({
  limit: Input.Count(MAX_IN_FLIGHT),
  per: Input.DurationIn({ min: "1 millis", max: MAX_RATE_PERIOD }),
  burst: Schema.optional(Input.Count(MAX_IN_FLIGHT))
}))
const rateOf = (name: string) => {
  const decode = Input.argument(name, RateInput)
  return (rate: Rate | null | undefined) =>
    Effect.gen(function*() {
      if (rate === undefined || rate === null) return null
      if (typeof rate === "object") yield* onlyKnown(rate, ["limit", "per", "burst"], name)
      const decoded = yield* decode(rate)
      return decoded === null ? null : {
        limit: decoded.limit,
        seconds: Duration.toMillis(decoded.per) / 1000,
        burst: decoded.burst ?? decoded.limit
      }
    })
}
const decodeRate = rateOf("rate")
const decodeGroupRate = rateOf("groupRate")

const RateRow = Schema.NullOr(Schema.Struct({ limit: Schema.Number, perMillis: Schema.Number, burst: Schema.Number }))

const InboxLimitRow = Schema.Struct({
  consumer: Schema.String,
  maxInFlight: Schema.NullOr(Schema.Number),
  rate: RateRow,
  tokens: Schema.NullOr(Schema.Number),
  inFlight: Schema.Number,
  updatedAt: Schema.String,
  updatedBy: Schema.String
})

const LimitRow = Schema.Struct({
  topic: Schema.String,
  maxInFlight: Schema.NullOr(Schema.Number),
  groupMaxInFlight: Schema.NullOr(Schema.Number),
  rate: RateRow,
  groupRate: RateRow,
  tokens: Schema.NullOr(Schema.Number),
  groups: Schema.Array(Schema.Struct({
    group: Schema.String,
    maxInFlight: Schema.NullOr(Schema.Number),
    weight: Schema.Number,
    rate: RateRow
  })),
  inFlight: Schema.Number,
  updatedAt: Schema.String,
  updatedBy: Schema.String
})

/** A rate's columns (`prefix`: `l.rate_`) as JSON, its period in milliseconds. */
const rateJson = (prefix: string) =>
  `CASE WHEN ${prefix}limit IS NOT NULL THEN jsonb_build_object('limit', ${prefix}limit,
     'perMillis', round(${prefix}period * 1000), 'burst', ${prefix}burst) END`

const describeRate = (rate: { readonly limit: number; readonly seconds: number; readonly burst: number } | null) =>
  rate === null
    ? "none"
    : `${rate.limit} per ${Duration.format(Duration.seconds(rate.seconds))} (burst ${rate.burst})`

export const make: Effect.Effect<FlowControl["Service"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const t = settings.table
    const limitsTable = sql.literal(t("flow_limits"))
    const groupsTable = sql.literal(t("flow_group_limits"))
    const leases = sql.literal(t("flow_leases"))
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
        yield* sql`DELETE FROM ${leases} WHERE topic = ${topic}`
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
                      SET tokens = ${sql.literal(bucket(t, "l", topicRate, "clock_timestamp()"))},
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
    const groupRateOf = (c: "limit" | "period" | "burst") => groupRate(c, "o", "l", "b")
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

    const setLimit = Effect.fn("FlowControl.setLimit")(function*(topic: string, options: LimitOptions) {
      yield* onlyKnown(options, ["maxInFlight", "groupMaxInFlight", "rate", "groupRate", "by"])
      const decoded = yield* decodeTopic(topic)
      const max = yield* decodeMaxInFlight(options.maxInFlight ?? null)
      const groupMax = yield* decodeGroupMaxInFlight(options.groupMaxInFlight ?? null)
      const rate = yield* decodeRate(options.rate)
      const groupRate = yield* decodeGroupRate(options.groupRate)
      const by = options.by === undefined ? "an operator" : yield* decodeBy(options.by)
      yield* Effect.gen(function*() {
        yield* limitedAfresh(decoded, by, max)
        yield* rebucket(
          decoded,
          sql`UPDATE ${limitsTable} SET max_in_flight = ${max}, group_max_in_flight = ${groupMax},
                                        rate_limit = ${rate?.limit ?? null}, rate_period = ${rate?.seconds ?? null},
                                        rate_burst = ${rate?.burst ?? null},
                                        group_rate_limit = ${groupRate?.limit ?? null},
                                        group_rate_period = ${groupRate?.seconds ?? null},
                                        group_rate_burst = ${groupRate?.burst ?? null},
                                        updated_at = now(), updated_by = ${by}
               WHERE topic = ${decoded}`
        )
      }).pipe(sql.withTransaction, classifySqlErrors("FlowControl.setLimit"))
      yield* Effect.logInfo(
        `effect-durable: ${by} set the limits of topic ${decoded}: ${max ?? "no limit"} in flight, ${
          groupMax ?? "no limit"
        } per group, rate ${describeRate(rate)}, per-group rate ${describeRate(groupRate)}`
      )
    })

    const setGroup = Effect.fn("FlowControl.setGroup")(function*(topic: string, group: string, options: GroupOptions) {
      yield* onlyKnown(options, ["maxInFlight", "weight", "rate", "by"])
      const decodedTopic = yield* decodeTopic(topic)
      const decodedGroup = yield* decodeGroup(group)
      const max = yield* decodeMaxInFlight(options.maxInFlight ?? null)
      const weight = yield* decodeWeight(options.weight ?? 1)
      const rate = yield* decodeRate(options.rate)
      const by = options.by === undefined ? "an operator" : yield* decodeBy(options.by)
      yield* Effect.gen(function*() {
        yield* limitedBy(TOPIC_LIMITS, decodedTopic, by, topicInFlight.record(decodedTopic, null))
        yield* rebucket(
          decodedTopic,
          sql`INSERT INTO ${groupsTable} (topic, group_key, max_in_flight, weight, rate_limit, rate_period, rate_burst)
              VALUES (${decodedTopic}, ${decodedGroup}, ${max}, ${weight},
                      ${rate?.limit ?? null}, ${rate?.seconds ?? null}, ${rate?.burst ?? null})
              ON CONFLICT (topic, group_key) DO UPDATE SET max_in_flight = excluded.max_in_flight,
                                                          weight = excluded.weight, rate_limit = excluded.rate_limit,
                                                          rate_period = excluded.rate_period,
                                                          rate_burst = excluded.rate_burst`
        )
        yield* sql`UPDATE ${limitsTable} SET updated_at = now(), updated_by = ${by} WHERE topic = ${decodedTopic}`
      }).pipe(sql.withTransaction, classifySqlErrors("FlowControl.setGroup"))
      yield* Effect.logInfo(
        `effect-durable: ${by} set group ${decodedGroup} of topic ${decodedTopic}: ${
          max ?? "the topic's per-group limit"
        } in flight, weight ${weight}, rate ${rate === null ? "the topic's per-group rate" : describeRate(rate)}`
      )
    })

    const clear = Effect.fn("FlowControl.clear")(function*(topic: string) {
      const decoded = yield* decodeTopic(topic)
      // Its group settings go with it (ON DELETE CASCADE); its recorded capacities and fair-share places too.
      return yield* Effect.gen(function*() {
        // After every claim under way: one that took slots would record rows after these are gone.
        yield* noClaimsOf(TOPIC_LIMITS)
        const gone = yield* sql`DELETE FROM ${limitsTable} WHERE topic = ${decoded} RETURNING topic`
        yield* sql`DELETE FROM ${leases} WHERE topic = ${decoded}`
        yield* sql`DELETE FROM ${flowClaims} WHERE topic = ${decoded}`
        yield* sql`DELETE FROM ${sql.literal(t("flow_group_state"))} WHERE topic = ${decoded}`
        yield* sql`DELETE FROM ${buckets} WHERE topic = ${decoded}`
        return gone.length > 0
      }).pipe(sql.withTransaction, classifySqlErrors("FlowControl.clear"))
    })

    const limits = sql`
      SELECT l.topic, l.max_in_flight AS "maxInFlight", l.group_max_in_flight AS "groupMaxInFlight",
             ${sql.literal(rateJson("l.rate_"))} AS rate, ${sql.literal(rateJson("l.group_rate_"))} AS "groupRate",
             ${sql.literal(bucket(t, "l", topicRate, "clock_timestamp()"))} AS tokens,
             coalesce((SELECT jsonb_agg(jsonb_build_object('group', g.group_key, 'maxInFlight', g.max_in_flight,
                                                           'weight', g.weight, 'rate', ${
      sql.literal(rateJson("g.rate_"))
    }) ORDER BY g.group_key)
                         FROM ${groupsTable} g WHERE g.topic = l.topic), '[]'::jsonb) AS groups,
             (SELECT coalesce(sum(${sql.literal(stillHeld(t, "c"))}), 0)::int FROM ${flowClaims} c
               WHERE c.topic = l.topic) AS "inFlight",
             ${sql.literal(isoUtc("l.updated_at"))} AS "updatedAt", l.updated_by AS "updatedBy"
        FROM ${limitsTable} l ORDER BY l.topic`.pipe(
      decodeRows(LimitRow),
      classifySqlErrors("FlowControl.limits"),
      Effect.withSpan("FlowControl.limits")
    )

    const setInboxLimit = Effect.fn("FlowControl.setInboxLimit")(
      function*(consumer: string, options: InboxLimitOptions) {
        yield* onlyKnown(options, ["maxInFlight", "rate", "by"])
        const decoded = yield* decodeConsumer(consumer)
        const max = yield* decodeMaxInFlight(options.maxInFlight ?? null)
        const rate = yield* decodeRate(options.rate)
        if (max === null && rate === null) {
          return yield* Effect.fail(
            new InvalidInput({
              argument: "options",
              rule: "maxInFlight or rate (clearInbox removes a consumer's limits)"
            })
          )
        }
        const by = options.by === undefined ? "an operator" : yield* decodeBy(options.by)
        yield* Effect.gen(function*() {
          yield* limitedBy(CONSUMER_LIMITS, decoded, by, Effect.void)
          // What is in flight now, recorded afresh (exact: no claim runs while the lock is held),
          // so a limit set on a consumer that had only a rate counts what its claims took.
          yield* consumerInFlight.afresh(decoded, max)
          yield* rebucketOwn(
            CONSUMER_LIMITS,
            decoded,
            sql`UPDATE ${inboxLimitsTable} SET max_in_flight = ${max}, rate_limit = ${rate?.limit ?? null},
                                               rate_period = ${rate?.seconds ?? null},
                                               rate_burst = ${rate?.burst ?? null}, updated_at = now(),
                                               updated_by = ${by}
                 WHERE consumer = ${decoded}`
          )
        }).pipe(sql.withTransaction, classifySqlErrors("FlowControl.setInboxLimit"))
        yield* Effect.logInfo(
          `effect-durable: ${by} set the limits of inbox consumer ${decoded}: ${max ?? "no limit"} in flight, rate ${
            describeRate(rate)
          }`
        )
      }
    )

    const clearInbox = Effect.fn("FlowControl.clearInbox")(function*(consumer: string) {
      const decoded = yield* decodeConsumer(consumer)
      return yield* Effect.gen(function*() {
        yield* noClaimsOf(CONSUMER_LIMITS)
        const gone = yield* sql`DELETE FROM ${inboxLimitsTable} WHERE consumer = ${decoded} RETURNING consumer`
        yield* sql`DELETE FROM ${inboxClaims} WHERE consumer = ${decoded}`
        return gone.length > 0
      }).pipe(sql.withTransaction, classifySqlErrors("FlowControl.clearInbox"))
    })

    const inboxLimits = sql`
      SELECT l.consumer, l.max_in_flight AS "maxInFlight", ${sql.literal(rateJson("l.rate_"))} AS rate,
             ${sql.literal(bucket(t, "l", topicRate, "clock_timestamp()"))} AS tokens,
             (SELECT coalesce(sum(${sql.literal(heldOfClaim(t, "c"))}), 0)::int FROM ${inboxClaims} c
               WHERE c.consumer = l.consumer) AS "inFlight",
             ${sql.literal(isoUtc("l.updated_at"))} AS "updatedAt", l.updated_by AS "updatedBy"
        FROM ${inboxLimitsTable} l ORDER BY l.consumer`.pipe(
      decodeRows(InboxLimitRow),
      classifySqlErrors("FlowControl.inboxLimits"),
      Effect.withSpan("FlowControl.inboxLimits")
    )

    return FlowControl.of({ setLimit, setGroup, clear, limits, setInboxLimit, clearInbox, inboxLimits })
  }
)

export const layer: Layer.Layer<FlowControl, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(
  FlowControl,
  make
)
