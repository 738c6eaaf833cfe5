// An order workflow on PostgreSQL: reserve stock (undone if the order fails later), wait for
// the payment provider's signal, charge, cool off on the database clock, ship. Each step is an
// activity: recorded once it succeeds, so a replay (after a signal, a clock, a crash) skips it.
import * as Durable from "@effect-durable/pg/Durable"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as Activity from "effect/workflow/Activity"
import * as DurableClock from "effect/workflow/DurableClock"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"

export const PlaceOrder = Workflow.make("PlaceOrder", {
  payload: { orderId: Schema.String, amount: Schema.Number },
  success: Schema.String,
  idempotencyKey: ({ orderId }) => orderId
})

/** Completed by the payment provider's callback, from any process. */
export const PaymentAuthorized = DurableDeferred.make("PaymentAuthorized", { success: Schema.String })

/** What each step does; here, rows in `order_events` (the order's own table). */
const event = (orderId: string, what: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`INSERT INTO order_events (order_id, event) VALUES (${orderId}, ${what})`
  ).pipe(Effect.orDie, Effect.asVoid)

export const PlaceOrderLayer = PlaceOrder.toLayer(({ amount, orderId }) =>
  Effect.gen(function*() {
    // Stock lives in this database: reserving it is transactional (exactly once).
    yield* Activity.make({ name: "reserve", execute: event(orderId, "reserved") }).pipe(
      PgWorkflowEngine.transactional,
      Workflow.withCompensation(() => event(orderId, "released"))
    )
    const authorization = yield* DurableDeferred.await(PaymentAuthorized)
    yield* Activity.make({ name: "charge", execute: event(orderId, `charged ${amount} (${authorization})`) })
    yield* DurableClock.sleep({ name: "cool-off", duration: "1 second", inMemoryThreshold: "0 millis" })
    yield* Activity.make({ name: "ship", execute: event(orderId, "shipped") })
    return `order ${orderId} shipped`
  })
)

/**
 * Start an order inside your own transaction: the order row and the execution commit
 * together, or neither does.
 */
export const placeOrder = (orderId: string, amount: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(
      Effect.andThen(
        sql`INSERT INTO orders (id, amount) VALUES (${orderId}, ${amount})`,
        PlaceOrder.execute({ orderId, amount }, { discard: true })
      )
    ))

/** The payment provider's callback: complete the deferred of that order's execution. */
export const paymentAuthorized = (orderId: string, authorization: string) =>
  Effect.gen(function*() {
    const executionId = yield* PlaceOrder.executionId({ orderId, amount: 0 })
    const token = DurableDeferred.tokenFromExecutionId(PaymentAuthorized, { workflow: PlaceOrder, executionId })
    yield* DurableDeferred.succeed(PaymentAuthorized, { token, value: authorization })
  })

/** The application: the substrate, the engine over it, the workflow registered with it. */
export const AppLayer = (connection: Durable.Options["connection"]) =>
  PlaceOrderLayer.pipe(
    Layer.provideMerge(PgWorkflowEngine.layer()),
    Layer.provideMerge(Durable.layer({ connection, migrate: true }))
  )
