// docs/testing.md "Testing your application": a test file for an application on the substrate —
// a command through the mutation ledger and the outbox, the projector drained once, a consumer
// that applies each delivery through the inbox — on a fresh, migrated PostgreSQL database.
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as Inbox from "@effect-durable/pg/Inbox"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// The application's command: the order, its ledger record and `order-placed` commit together.
const placeOrder = (key: string, order: { readonly sku: string; readonly qty: number }) =>
  Effect.gen(function*() {
    const ledger = yield* MutationLedger.MutationLedger
    const outbox = yield* Outbox.Outbox
    const sql = yield* SqlClient.SqlClient
    return yield* ledger.execute(
      { subject: "shop", operation: "place-order", key },
      { kind: "order", eligibility: new Uint8Array(), fingerprint: yield* Fingerprint.fingerprint(order) },
      Effect.gen(function*() {
        const [row] = yield* sql<
          { id: number }
        >`INSERT INTO orders (sku, qty) VALUES (${order.sku}, ${order.qty}) RETURNING id`
        yield* outbox.enqueue("order-placed", { orderId: row!.id })
        return MutationLedger.accept({ orderId: row!.id })
      })
    )
  })

// The application's consumer: one shipment per order, however often a message is delivered.
const Shipping = Publisher.layerHandler((message) =>
  Effect.gen(function*() {
    const inbox = yield* Inbox.Inbox
    const sql = yield* SqlClient.SqlClient
    const { orderId } = message.payload as { readonly orderId: number }
    yield* inbox.handle("shipping", message.id, sql`INSERT INTO shipments (order_id) VALUES (${orderId})`)
  }).pipe(Effect.catch((error) => Effect.fail(Publisher.retryable(error.message))))
)

// One layer for the file: a fresh database, migrated, with every substrate service on it.
it.layer(TestSubstrate.layer())((it) => {
  it.effect("an order placed twice with one key ships once, even when its message is delivered twice", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE orders (id serial PRIMARY KEY, sku text NOT NULL, qty int NOT NULL)`
      yield* sql`CREATE TABLE shipments (order_id int NOT NULL)`

      const first = yield* placeOrder("checkout-1", { sku: "A-1", qty: 2 })
      const retry = yield* placeOrder("checkout-1", { sku: "A-1", qty: 2 }) // the client retried
      expect([first._tag, retry._tag]).toEqual(["First", "Replay"])

      // What the projector fiber does in the app, run once: deliver what is ready, then stop.
      const counts = yield* Projector.drain({ topics: ["order-placed"] }).pipe(Effect.provide(Shipping))
      expect(counts).toMatchObject({ claimed: 1, delivered: 1 })

      // At least once: an operator replays the message; the inbox applies it once all the same.
      const admin = yield* OutboxAdmin.OutboxAdmin
      const [message] = yield* sql<{ id: string }>`SELECT id::text AS id FROM durable.outbox_messages`
      expect(yield* admin.replay([message!.id])).toEqual([message!.id])
      const again = yield* Projector.drain({ topics: ["order-placed"] }).pipe(Effect.provide(Shipping))
      expect(again).toMatchObject({ delivered: 1 })

      expect(yield* sql`SELECT count(*)::int AS n FROM orders`).toEqual([{ n: 1 }])
      expect(yield* sql`SELECT count(*)::int AS n FROM shipments`).toEqual([{ n: 1 }])
    }))
})
