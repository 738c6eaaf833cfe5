// Flow limits: a mail topic sends at most 20 messages at once across every projector of every
// process (the provider's connection limit), at most 2 per customer, and a customer on the
// enterprise tier gets 5 and three times the share. Each message names its customer as its
// group: a customer with 100,000 messages queued does not hold up one with 10.
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Effect from "effect/Effect"

/** Set once (a deploy step, an operator: `effect-durable limits set emails --max 20 --group-max 2`). */
export const configure = Effect.gen(function*() {
  const flow = yield* FlowControl.FlowControl
  yield* flow.setLimit("emails", { maxInFlight: 20, groupMaxInFlight: 2, by: "deploy" })
  yield* flow.setGroup("emails", "customer-42", { maxInFlight: 5, weight: 3, by: "deploy" })
  return yield* flow.limits
})

/** Each message of a customer in its group; the projector needs nothing else. */
export const send = (customer: string, to: string) =>
  Effect.flatMap(Outbox.Outbox, (outbox) => outbox.enqueue("emails", { to }, { group: customer }))
