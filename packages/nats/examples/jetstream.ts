// README "NATS JetStream": the projector publishes each committed message once per outbox id
// (Nats-Msg-Id); a durable consumer applies each delivery once through the inbox.
import * as JetStreamInbox from "@effect-durable/nats/JetStreamInbox"
import * as JetStreamPublisher from "@effect-durable/nats/JetStreamPublisher"
import * as Nats from "@effect-durable/nats/Nats"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"

// Producer side: give this Publisher to Projector.layer.
export const Deliver = (servers: string) =>
  JetStreamPublisher.layer({ subject: (topic) => `orders.${topic}` }).pipe(Layer.provide(Nats.layer({ servers })))

// Consumer side: runs until its scope closes; acks only after the inbox transaction commits.
export const invoicing = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  JetStreamInbox.consume({
    stream: "ORDERS",
    durable: "invoicing",
    handle: (delivery) =>
      sql`INSERT INTO invoices (order_id) VALUES (${(delivery.payload as { orderId: number }).orderId})`
  }))
