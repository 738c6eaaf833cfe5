// At most two charges per tenant at once, across every process: the payment gateway takes two
// concurrent requests per merchant account. The charge is a workflow of its own, grouped by
// tenant, and its runs are limited; an invoice runs it as a child and suspends (holding
// nothing) while it queues behind the tenant's limit. Another tenant's charges do not wait.
import * as Durable from "@effect-durable/pg/Durable"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as WorkflowLimits from "@effect-durable/workflow/WorkflowLimits"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as Activity from "effect/workflow/Activity"
import * as Workflow from "effect/workflow/Workflow"

const InvoicePayload = { tenant: Schema.String, invoice: Schema.String, amount: Schema.Number }

export const Charge = WorkflowLimits.groupBy(
  Workflow.make("Charge", {
    payload: InvoicePayload,
    success: Schema.String,
    idempotencyKey: ({ invoice }) => invoice
  }),
  ({ tenant }) => tenant
)

/** The gateway call (here a table row and 50 ms; in a service, the provider's API). */
const callGateway = (tenant: string, invoice: string, amount: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // A call run again (its run replayed after a crash) starts its row again.
    yield* sql`INSERT INTO gateway_calls (tenant, invoice, amount) VALUES (${tenant}, ${invoice}, ${amount})
               ON CONFLICT (invoice) DO UPDATE SET started_at = clock_timestamp(), ended_at = NULL`
    yield* Effect.sleep("50 millis")
    yield* sql`UPDATE gateway_calls SET ended_at = clock_timestamp() WHERE invoice = ${invoice}`
    return `charged ${amount}`
  }).pipe(Effect.orDie)

export const ChargeLayer = Charge.toLayer(({ amount, invoice, tenant }) =>
  Activity.make({ name: "gateway", success: Schema.String, execute: callGateway(tenant, invoice, amount) })
)

export const Invoice = Workflow.make("Invoice", {
  payload: InvoicePayload,
  success: Schema.String,
  idempotencyKey: ({ invoice }) => invoice
})

export const InvoiceLayer = Invoice.toLayer((payload) =>
  Effect.map(Charge.execute(payload), (receipt) => `invoice ${payload.invoice}: ${receipt}`)
)

/** Set once (a deploy step; an operator: `effect-durable limits set workflow.run:Charge --group-max 2`). */
export const configure = WorkflowLimits.set(Charge, { groupMaxInFlight: 2, by: "deploy" })

export const AppLayer = (connection: Durable.Options["connection"]) =>
  Layer.mergeAll(ChargeLayer, InvoiceLayer).pipe(
    Layer.provideMerge(PgWorkflowEngine.layer()),
    Layer.provideMerge(Durable.layer({ connection, migrate: true }))
  )
