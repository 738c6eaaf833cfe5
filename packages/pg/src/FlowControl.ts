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
import { printable } from "@effect-durable/core/Printable"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import * as Changes from "./internal/flow/changes.js"
import {
  decodeBy,
  decodeConsumer,
  decodeGroup,
  decodeLimitOptions,
  decodeMaxInFlight,
  decodeRate,
  decodeTopic,
  decodeWeight,
  describeRate,
  onlyKnown
} from "./internal/flow/decode.js"
import { CONSUMER_LIMITS, TOPIC_LIMITS } from "./internal/flow/limits.js"
import * as Listing from "./internal/flow/listing.js"

export { MAX_IN_FLIGHT, MAX_RATE_PERIOD, MAX_WEIGHT } from "./internal/flow/decode.js"

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

export const make: Effect.Effect<FlowControl["Service"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const t = settings.table
    const changes = Changes.make(sql, settings)
    const { buckets, flowClaims, groupsTable, inboxClaims, inboxLimitsTable, limitsTable } = changes.tables
    const { consumerInFlight, limitedAfresh, limitedBy, noClaimsOf, rebucket, rebucketOwn, topicInFlight } = changes

    const setLimit = Effect.fn("FlowControl.setLimit")(function*(topic: string, options: LimitOptions) {
      const { by, groupMaxInFlight: groupMax, groupRate, maxInFlight: max, rate, topic: decoded } =
        yield* decodeLimitOptions(topic, options)
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
        `effect-durable: ${printable(by)} set the limits of topic ${printable(decoded)}: ${
          max ?? "no limit"
        } in flight, ${groupMax ?? "no limit"} per group, rate ${describeRate(rate)}, per-group rate ${
          describeRate(groupRate)
        }`
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
        `effect-durable: ${printable(by)} set group ${printable(decodedGroup)} of topic ${printable(decodedTopic)}: ${
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
        yield* sql`DELETE FROM ${flowClaims} WHERE topic = ${decoded}`
        yield* sql`DELETE FROM ${sql.literal(t("flow_group_state"))} WHERE topic = ${decoded}`
        yield* sql`DELETE FROM ${buckets} WHERE topic = ${decoded}`
        return gone.length > 0
      }).pipe(sql.withTransaction, classifySqlErrors("FlowControl.clear"))
    })

    const limits = Listing.topicLimits(sql, t)

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
          `effect-durable: ${printable(by)} set the limits of inbox consumer ${printable(decoded)}: ${
            max ?? "no limit"
          } in flight, rate ${describeRate(rate)}`
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

    const inboxLimits = Listing.consumerLimits(sql, t)

    return FlowControl.of({ setLimit, setGroup, clear, limits, setInboxLimit, clearInbox, inboxLimits })
  }
)

export const layer: Layer.Layer<FlowControl, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(
  FlowControl,
  make
)
