// Inbox limits: a payment processor lets us hold 4 requests open at once and send 100 a
// minute. Deliveries arrive faster than that; the stored inbox keeps them, and every worker of
// every process claims within the consumer's limits — the database holds the count and the
// bucket, so adding workers never adds load on the processor.
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Inbox from "@effect-durable/pg/Inbox"
import * as InboxWorker from "@effect-durable/pg/InboxWorker"
import * as Effect from "effect/Effect"

/** Set once (an operator: `effect-durable limits inbox set payments --max 4 --rate 100/1m`). */
export const configure = Effect.gen(function*() {
  const flow = yield* FlowControl.FlowControl
  yield* flow.setInboxLimit("payments", { maxInFlight: 4, rate: { limit: 100, per: "1 minute" }, by: "deploy" })
  return yield* flow.inboxLimits
})

/** A delivery from the broker: stored at once (a redelivery is a `Duplicate`). */
export const receive = (messageId: string, payment: { readonly amount: number }) =>
  Effect.flatMap(Inbox.Inbox, (inbox) => inbox.receive("payments", messageId, payment))

/** One worker's turn: at most what the limits leave, however many workers run this. */
export const work = (worker: string, charge: (payment: unknown) => Effect.Effect<void>) =>
  Effect.gen(function*() {
    const inbox = yield* InboxWorker.InboxWorker
    const entries = yield* inbox.claim({ consumer: "payments", worker, limit: 50, lease: "30 seconds" })
    yield* Effect.forEach(entries, (entry) => charge(entry.payload), { concurrency: "unbounded" })
    yield* inbox.completeMany(entries.map((entry) => entry.claim))
    return entries.length
  })
