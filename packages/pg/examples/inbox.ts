// README "Inbox": a consumer that may see the same delivery twice applies it once.
import * as Inbox from "@effect-durable/pg/Inbox"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

export const onOrderPlaced = (delivery: { readonly messageId: string; readonly orderId: number }) =>
  Effect.gen(function*() {
    const inbox = yield* Inbox.Inbox
    const sql = yield* SqlClient.SqlClient
    // The receipt and the effect commit together: a redelivery finds the receipt.
    return yield* inbox.handle(
      "invoicing",
      delivery.messageId,
      sql`INSERT INTO invoices (order_id) VALUES (${delivery.orderId})`
    )
  })

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS invoices (id serial PRIMARY KEY, order_id int)`
  const first = yield* onOrderPlaced({ messageId: "outbox-17", orderId: 1 })
  const redelivered = yield* onOrderPlaced({ messageId: "outbox-17", orderId: 1 })
  const invoices = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM invoices`
  return { first: first._tag, redelivered: redelivered._tag, invoices: invoices[0]!.n } // Processed, Duplicate, 1
})
