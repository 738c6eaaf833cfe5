// README "The projector": a fiber next to your app that delivers outbox messages to a
// handler, at least once; here drained once, as a one-shot job or a test would.
import * as Durable from "@effect-durable/pg/Durable"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

export const Deliver = Publisher.layerHandler((message) =>
  message.topic === "order-placed"
    ? Effect.logInfo(`confirming order ${message.id}`) // any Effect<void, PublishError>
    : Effect.fail(Publisher.permanent(`no route for ${message.topic}`))
)

// In a service: the projector runs as long as the app (Layer.launch(App) or provided to your server).
export const App = Projector.layer({ topics: ["order-placed"] }).pipe(
  Layer.provide(Deliver),
  Layer.provideMerge(Durable.layerConfig({ migrate: true }))
)

// In a job or a test: deliver what is ready, then stop.
export const program = Effect.gen(function*() {
  const outbox = yield* Outbox.Outbox
  yield* outbox.enqueue("order-placed", { orderId: 1 })
  yield* outbox.enqueue("order-cancelled", { orderId: 1 }) // no route: a dead letter, at once
  return yield* Projector.drain({ topics: ["order-placed", "order-cancelled"] }).pipe(Effect.provide(Deliver))
})
