/**
 * The limits as an operator reads them: every limited topic and inbox consumer, its limits and
 * rates, the tokens its bucket holds now and what it has in flight (its claim rows' entries
 * that still hold capacity, counted exactly).
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as SqlClient from "effect/sql/SqlClient"
import { classifySqlErrors } from "../../ErrorClassification.js"
import { decodeRows } from "../rows.js"
import { isoUtc } from "../timestamps.js"
import { heldBy } from "./capacity.js"
import { CONSUMER_LIMITS, type Tables, TOPIC_LIMITS } from "./limits.js"
import { bucket, ownRate } from "./rates.js"

const RateRow = Schema.NullOr(Schema.Struct({ limit: Schema.Number, perMillis: Schema.Number, burst: Schema.Number }))

const TopicLimitRow = Schema.Struct({
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

const InboxLimitRow = Schema.Struct({
  consumer: Schema.String,
  maxInFlight: Schema.NullOr(Schema.Number),
  rate: RateRow,
  tokens: Schema.NullOr(Schema.Number),
  inFlight: Schema.Number,
  updatedAt: Schema.String,
  updatedBy: Schema.String
})

/** A rate's columns (`prefix`: `l.rate_`) as JSON, its period in milliseconds. */
const rateJson = (prefix: string) =>
  `CASE WHEN ${prefix}limit IS NOT NULL THEN jsonb_build_object('limit', ${prefix}limit,
     'perMillis', round(${prefix}period * 1000), 'burst', ${prefix}burst) END`

/** Every limited topic, with what is in flight now. */
export const topicLimits = (sql: SqlClient.SqlClient, t: Tables) =>
  sql`
      SELECT l.topic, l.max_in_flight AS "maxInFlight", l.group_max_in_flight AS "groupMaxInFlight",
             ${sql.literal(rateJson("l.rate_"))} AS rate, ${sql.literal(rateJson("l.group_rate_"))} AS "groupRate",
             ${sql.literal(bucket(t, "l", ownRate, "clock_timestamp()"))} AS tokens,
             coalesce((SELECT jsonb_agg(jsonb_build_object('group', g.group_key, 'maxInFlight', g.max_in_flight,
                                                           'weight', g.weight, 'rate', ${
    sql.literal(rateJson("g.rate_"))
  }) ORDER BY g.group_key)
                         FROM ${sql.literal(t("flow_group_limits"))} g WHERE g.topic = l.topic), '[]'::jsonb) AS groups,
             ${sql.literal(heldBy(t, TOPIC_LIMITS, "l.topic"))} AS "inFlight",
             ${sql.literal(isoUtc("l.updated_at"))} AS "updatedAt", l.updated_by AS "updatedBy"
        FROM ${sql.literal(t("flow_limits"))} l ORDER BY l.topic`.pipe(
    decodeRows(TopicLimitRow),
    classifySqlErrors("FlowControl.limits"),
    Effect.withSpan("FlowControl.limits")
  )

/** Every limited inbox consumer, with what is in flight now. */
export const consumerLimits = (sql: SqlClient.SqlClient, t: Tables) =>
  sql`
      SELECT l.consumer, l.max_in_flight AS "maxInFlight", ${sql.literal(rateJson("l.rate_"))} AS rate,
             ${sql.literal(bucket(t, "l", ownRate, "clock_timestamp()"))} AS tokens,
             ${sql.literal(heldBy(t, CONSUMER_LIMITS, "l.consumer"))} AS "inFlight",
             ${sql.literal(isoUtc("l.updated_at"))} AS "updatedAt", l.updated_by AS "updatedBy"
        FROM ${sql.literal(t("inbox_limits"))} l ORDER BY l.consumer`.pipe(
    decodeRows(InboxLimitRow),
    classifySqlErrors("FlowControl.inboxLimits"),
    Effect.withSpan("FlowControl.inboxLimits")
  )
