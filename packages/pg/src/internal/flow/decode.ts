/**
 * The decoding of flow-control options: every limit, weight and rate as the database holds
 * it, an unknown option named (a typo must not pass for "no limit"). `FlowControl` and the
 * in-memory outbox's limits read options through here.
 */
import { InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { LimitOptions, Rate } from "../../FlowControl.js"

/** The most a limit may allow in flight. */
export const MAX_IN_FLIGHT = 1_000_000
/** The largest weight of a group. */
export const MAX_WEIGHT = 1000
/** The longest period of a rate. */
export const MAX_RATE_PERIOD = "7 days"

export const decodeTopic = Input.argument("topic", Input.Text(128))
export const decodeConsumer = Input.argument("consumer", Input.Text(128))
export const decodeGroup = Input.argument("group", Input.Text(128))
export const decodeBy = Input.argument("by", Input.Text(128))
const limitOf = (name: string) => Input.argument(name, Schema.NullOr(Input.Count(MAX_IN_FLIGHT)))
export const decodeMaxInFlight = limitOf("maxInFlight")
export const decodeGroupMaxInFlight = limitOf("groupMaxInFlight")
export const decodeWeight = Input.argument("weight", Input.Count(MAX_WEIGHT))

/**
 * Refuses options that are not an object (`null`, a string: a TypeError before) and an option
 * this call does not know (a typo must not pass for "no limit").
 */
export const onlyKnown = (options: unknown, known: ReadonlyArray<string>, prefix = "options") => {
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    return Effect.fail(new InvalidInput({ argument: prefix, rule: `an object of ${known.join(", ")}` }))
  }
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
      yield* onlyKnown(rate, ["limit", "per", "burst"], name)
      const decoded = yield* decode(rate)
      if (decoded === null) return null
      // Whole milliseconds: a period is shown and set again in milliseconds (1.5 ms read back as 2).
      const millis = Duration.toMillis(decoded.per)
      if (!Number.isInteger(millis)) {
        return yield* new InvalidInput({
          argument: `${name}.per`,
          rule: `a whole number of milliseconds, from 1 millisecond to ${MAX_RATE_PERIOD}`
        })
      }
      return { limit: decoded.limit, seconds: millis / 1000, burst: decoded.burst ?? decoded.limit }
    })
}
export const decodeRate = rateOf("rate")
export const decodeGroupRate = rateOf("groupRate")

export const describeRate = (
  rate: { readonly limit: number; readonly seconds: number; readonly burst: number } | null
) =>
  rate === null
    ? "none"
    : `${rate.limit} per ${Duration.format(Duration.seconds(rate.seconds))} (burst ${rate.burst})`

/** `FlowControl.setLimit`'s options, decoded. */
export const decodeLimitOptions = Effect.fnUntraced(function*(topic: string, options: LimitOptions) {
  yield* onlyKnown(options, ["maxInFlight", "groupMaxInFlight", "rate", "groupRate", "by"])
  return {
    topic: yield* decodeTopic(topic),
    maxInFlight: yield* decodeMaxInFlight(options.maxInFlight ?? null),
    groupMaxInFlight: yield* decodeGroupMaxInFlight(options.groupMaxInFlight ?? null),
    rate: yield* decodeRate(options.rate),
    groupRate: yield* decodeGroupRate(options.groupRate),
    by: options.by === undefined ? "an operator" : yield* decodeBy(options.by)
  }
})
