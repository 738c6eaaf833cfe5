import { eventually } from "@effect-durable/testing/Eventually"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import * as Order from "../examples/order.js"

describe("the workflow guide's example does what the guide says", () => {
  it.layer(TestDatabase.layerFresh({ applicationName: "workflow-example-test" }), { excludeTestServices: true })(
    (it) => {
      it.effect("an order: started in the business transaction, waits for its payment signal, ships once", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const db = yield* TestDatabase.TestDatabase
          yield* sql`CREATE TABLE orders (id text PRIMARY KEY, amount numeric NOT NULL)`
          yield* sql`CREATE TABLE order_events (order_id text NOT NULL, event text NOT NULL)`
          const events = (orderId: string) =>
            Effect.map(
              sql<{ event: string }>`SELECT event FROM order_events WHERE order_id = ${orderId} ORDER BY ctid`,
              (rows) => rows.map((row) => row.event)
            )
          yield* Effect.gen(function*() {
            const executionId = yield* Order.placeOrder("A-1", 30)
            // The same order twice: one execution (the business row's key refuses the second).
            expect(yield* Effect.flip(Order.placeOrder("A-1", 30))).toBeDefined()
            yield* eventually(events("A-1"), (e) => e.length === 1)
            yield* Order.paymentAuthorized("A-1", "auth-77")
            const result = yield* eventually(
              Order.PlaceOrder.poll(executionId),
              (r) => Option.isSome(r) && r.value._tag === "Complete"
            )
            expect(Option.isSome(result)).toBe(true)
            expect(yield* Order.PlaceOrder.execute({ orderId: "A-1", amount: 30 })).toBe("order A-1 shipped")
            expect(yield* events("A-1")).toEqual(["reserved", "charged 30 (auth-77)", "shipped"])
          }).pipe(Effect.provide(Order.AppLayer({ url: db.url, applicationName: "workflow-example" })))
        }))
    }
  )
})
