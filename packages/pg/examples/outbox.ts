// README "Outbox": the order row, the ledger record and the `order-placed` message commit
// together, once per idempotency key; a worker then claims and marks the message.
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

export const placeOrder = (
  tenant: string,
  idempotencyKey: string,
  order: { readonly sku: string; readonly qty: number }
) =>
  Effect.gen(function*() {
    const ledger = yield* MutationLedger.MutationLedger
    const outbox = yield* Outbox.Outbox
    const sql = yield* SqlClient.SqlClient
    return yield* ledger.execute(
      { subject: tenant, operation: "place-order", key: idempotencyKey },
      { kind: "order", eligibility: new Uint8Array(), fingerprint: yield* Fingerprint.fingerprint(order) },
      Effect.gen(function*() {
        const [row] = yield* sql<{ id: number }>`
          INSERT INTO shop_orders (tenant, sku, qty) VALUES (${tenant}, ${order.sku}, ${order.qty}) RETURNING id`
        // Same transaction: the message exists if and only if the order does.
        yield* outbox.enqueue("order-placed", { orderId: row!.id, ...order }, { orderingKey: tenant })
        return MutationLedger.accept({ orderId: row!.id })
      })
    )
  })

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const worker = yield* OutboxWorker.OutboxWorker
  yield* sql`CREATE TABLE IF NOT EXISTS shop_orders (id serial PRIMARY KEY, tenant text, sku text, qty int)`
  yield* placeOrder("acme", "checkout-42", { sku: "A-1", qty: 2 })
  yield* placeOrder("acme", "checkout-42", { sku: "A-1", qty: 2 }) // a retry: replayed, no second message

  // What the projector does for you, by hand: claim, deliver, mark.
  const claimed = yield* worker.claim({ worker: "worker-1", topics: ["order-placed"], limit: 10, lease: "30 seconds" })
  for (const message of claimed) {
    // deliver(message.payload) to a broker or handler here, then:
    yield* worker.markProjected(message.claim)
  }
  return claimed.map((message) => message.payload) // [{ orderId: 1, sku: "A-1", qty: 2 }]
})
