/**
 * The limits an operator sets, as `limits set`, `limits group` and `limits inbox set` take
 * them and the admin page's Limits form sends them, read by one set of rules: a rate is
 * N/PERIOD, a burst needs its rate, and a set gives at least one limit (clearing is its own
 * action). A refusal is an `InvalidInput` naming the field as the operator wrote it (`--burst`
 * on the command line, `burst` on the page); the library then checks the values' ranges.
 */
import { InvalidInput } from "@effect-durable/core/Errors"
import { printable } from "@effect-durable/core/Printable"
import type * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Effect from "effect/Effect"
import { parseRate } from "./durations.js"

/** What the operator gave: `null` (or blank text) is a field left empty. */
export interface TopicLimitFields {
  readonly maxInFlight: number | null
  readonly groupMaxInFlight: number | null
  readonly rate: string | null
  readonly burst: number | null
  readonly groupRate: string | null
  readonly groupBurst: number | null
}

export type InboxLimitFields = Pick<TopicLimitFields, "maxInFlight" | "rate" | "burst">

/** How the surface names each field, the whole set, and the action that removes the limits. */
export interface FieldNames extends Readonly<Record<keyof TopicLimitFields, string>> {
  readonly options: string
  readonly clear: string
}

export const RATE_RULE = "N/PERIOD, such as 10/1m, 5/s or 100/2h"

const blank = (text: string | null): text is null => text === null || text.trim() === ""

/** A rate field and its burst field as the library's rate (`null`: none); a burst alone is refused. */
export const rateOf = (
  names: { readonly rate: string; readonly burst: string },
  text: string | null,
  burst: number | null
): Effect.Effect<FlowControl.Rate | null, InvalidInput> => {
  if (blank(text)) {
    return burst === null
      ? Effect.succeed(null)
      : Effect.fail(new InvalidInput({ argument: names.burst, rule: `given only with ${names.rate} (${RATE_RULE})` }))
  }
  const rate = parseRate(text)
  if (rate === undefined) {
    return Effect.fail(new InvalidInput({ argument: names.rate, rule: `${RATE_RULE} (got ${printable(text)})` }))
  }
  return Effect.succeed(burst === null ? rate : { ...rate, burst })
}

/** A topic's limits, every one given (`null`: none); at least one of them. */
export const topicLimits = Effect.fnUntraced(function*(fields: TopicLimitFields, names: FieldNames) {
  const rate = yield* rateOf(names, fields.rate, fields.burst)
  const groupRate = yield* rateOf(
    { rate: names.groupRate, burst: names.groupBurst },
    fields.groupRate,
    fields.groupBurst
  )
  const { groupMaxInFlight, maxInFlight } = fields
  if (maxInFlight === null && groupMaxInFlight === null && rate === null && groupRate === null) {
    return yield* new InvalidInput({
      argument: names.options,
      rule:
        `give ${names.maxInFlight}, ${names.groupMaxInFlight}, ${names.rate} or ${names.groupRate} (${names.clear} removes a topic's limits)`
    })
  }
  return { maxInFlight, groupMaxInFlight, rate, groupRate }
})

/** A stored-inbox consumer's limits (`null`: none); at least one of them. */
export const inboxLimits = Effect.fnUntraced(function*(fields: InboxLimitFields, names: FieldNames) {
  const rate = yield* rateOf(names, fields.rate, fields.burst)
  if (fields.maxInFlight === null && rate === null) {
    return yield* new InvalidInput({
      argument: names.options,
      rule: `give ${names.maxInFlight} or ${names.rate} (${names.clear} removes a consumer's limits)`
    })
  }
  return { maxInFlight: fields.maxInFlight, rate }
})
