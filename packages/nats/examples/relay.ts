// docs/feeds.md "The relay": the order topics published to JetStream in the order their
// transactions committed, read from a replication slot (the server runs with wal_level =
// logical). Each message reaches the stream once: one published again after a crash carries
// the same Nats-Msg-Id, which the stream drops.
import * as JetStreamPublisher from "@effect-durable/nats/JetStreamPublisher"
import * as Nats from "@effect-durable/nats/Nats"
import * as Relay from "@effect-durable/projector/Relay"
import * as Layer from "effect/Layer"

export const OrdersToJetStream = (servers: string) =>
  Relay.layer({ slot: "orders_to_jetstream", topics: ["order-placed", "order-cancelled"] }).pipe(
    Layer.provide(JetStreamPublisher.layer({ subject: (topic) => `orders.${topic}` })),
    Layer.provide(Nats.layer({ servers }))
  )
