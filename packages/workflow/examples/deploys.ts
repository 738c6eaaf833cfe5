// A change deployed under running checkouts. Version 2 checks for fraud before it charges; a
// checkout that version 1 already charged must not be checked (or charged) again, so the check
// is guarded by a patch: runs past that point keep the old branch, new runs take the new one.
// It also sends a receipt at the end: appended after the last step, that change is compatible.
// Before the deploy, a replay test replays journals taken from the database against version 2;
// during it, the operator's view says what runs on which version and branch. Where a change
// cannot be made compatible, processes pin the runs they start to their version.
import * as Durable from "@effect-durable/pg/Durable"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as WorkflowDeploys from "@effect-durable/workflow/WorkflowDeploys"
import * as WorkflowPatch from "@effect-durable/workflow/WorkflowPatch"
import * as WorkflowReplay from "@effect-durable/workflow/WorkflowReplay"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as Activity from "effect/workflow/Activity"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"

export const Checkout = Workflow.make("Checkout", {
  payload: { orderId: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ orderId }) => orderId
})
export const Delivered = DurableDeferred.make("Delivered", { success: Schema.String })

/** What happened to an order, as rows (in a service: the payment provider, the risk service). */
const record = (orderId: string, event: string) =>
  Activity.make({
    name: event,
    execute: Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO checkout_events (order_id, event) VALUES (${orderId}, ${event})`.pipe(Effect.orDie)
    })
  })

/** Version 1: charge, wait for the delivery. */
export const CheckoutV1 = Checkout.toLayer(({ orderId }) =>
  Effect.gen(function*() {
    yield* record(orderId, "charge")
    const by = yield* DurableDeferred.await(Delivered)
    return `order ${orderId} delivered by ${by}`
  })
)

/** Version 2: a fraud check before the charge, for the runs that have not been charged yet. */
export const CheckoutV2 = Checkout.toLayer(({ orderId }) =>
  Effect.gen(function*() {
    yield* WorkflowPatch.ifPatched("fraud-check", {
      onTrue: () => record(orderId, "fraud-check"),
      onFalse: () => Effect.void
    })
    yield* record(orderId, "charge")
    const by = yield* DurableDeferred.await(Delivered)
    yield* record(orderId, "receipt")
    return `order ${orderId} delivered by ${by}`
  })
)

/**
 * The replay test: the journals of the unfinished checkouts (read from the database, or exported
 * with `effect-durable workflows show Checkout <id> --json`) replayed against version 2, in
 * memory; a `ReplayDiverged` names the run the deploy would stop and both sides.
 */
export const replayTest = Effect.gen(function*() {
  const journals = yield* WorkflowReplay.histories({ workflow: "Checkout", status: "suspended", limit: 100 })
  return yield* WorkflowReplay.replayAll(journals).pipe(
    Effect.provide(CheckoutV2.pipe(Layer.provideMerge(WorkflowReplay.layer())))
  )
})

/** What an operator reads during the deploy: runs by version, and the patch's branches. */
export const deployView = Effect.gen(function*() {
  const deploys = yield* WorkflowDeploys.make
  return {
    versions: yield* deploys.versions({ workflow: "Checkout" }),
    fraudCheck: WorkflowDeploys.use(yield* deploys.patches("Checkout"), "fraud-check")
  }
})

/**
 * A process of one version: its code, the engine recording that version, the substrate. Pinned,
 * the runs it starts are run only by processes of its version.
 */
export const AppLayer = (
  code: typeof CheckoutV1,
  version: string,
  connection: Durable.Options["connection"],
  pinned = false
) =>
  code.pipe(
    Layer.provideMerge(PgWorkflowEngine.layer({ version, pinned })),
    Layer.provideMerge(Durable.layer({ connection, migrate: true }))
  )
