// Rate limits: an SMS provider accepts 10 messages a second from us and 1 a second per
// recipient. The topic's bucket holds 10 (a second's worth) and each recipient's 3, so a short
// burst goes out at once and a long backlog at the provider's pace — across every projector of
// every process, on the database's clock.
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Effect from "effect/Effect"

/** Set once (an operator: `effect-durable limits set sms --rate 10/s --group-rate 1/s --group-burst 3`). */
export const configure = Effect.gen(function*() {
  const flow = yield* FlowControl.FlowControl
  yield* flow.setLimit("sms", {
    rate: { limit: 10, per: "1 second" },
    groupRate: { limit: 1, per: "1 second", burst: 3 },
    by: "deploy"
  })
  return yield* flow.limits
})

/** Each recipient is a group: one with a hundred messages queued takes its 1 a second, not the topic's 10. */
export const text = (phone: string, body: string) =>
  Effect.flatMap(Outbox.Outbox, (outbox) => outbox.enqueue("sms", { phone, body }, { group: phone }))
