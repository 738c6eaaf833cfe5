// docs/testing.md "Testing a workflow": a workflow test on a fresh, migrated PostgreSQL with the
// engine running in the test's layer. Two settings make it work:
// - `excludeTestServices: true`: the engine's clocks, leases and polls are the live clock's and
//   the database's. Under `it.effect`'s default TestClock nothing the engine waits for ever
//   fires, and the test ends in "condition not met in 30 s", then a hook timeout.
// - a short `pollInterval`: a run's wake-up normally comes by NOTIFY; the poll is the fallback.
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import { expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Activity from "effect/workflow/Activity"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"

// The application's workflow: charge, then wait for the customer's confirmation.
const Confirmed = DurableDeferred.make("Guide/Confirmed", { success: Schema.String })

const Subscribe = Workflow.make("Guide/Subscribe", {
  payload: { customer: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ customer }) => customer
})

let charges = 0
const SubscribeLayer = Subscribe.toLayer(({ customer }) =>
  Effect.gen(function*() {
    yield* Activity.make({ name: "charge", execute: Effect.sync(() => void charges++) })
    const by = yield* DurableDeferred.await(Confirmed)
    return `${customer} subscribed, confirmed by ${by}`
  })
)

const TestLayer = SubscribeLayer.pipe(
  Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "100 millis" })),
  Layer.provideMerge(TestSubstrate.layer())
)

it.layer(TestLayer, { excludeTestServices: true })((it) => {
  it.effect("a subscription is charged once and completes when the customer confirms", () =>
    Effect.gen(function*() {
      const executionId = yield* Subscribe.execute({ customer: "c-48" }, { discard: true })
      // Wait for what the test needs (here: the run suspended on the deferred), never a fixed sleep.
      yield* eventually(Subscribe.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Suspended")
      const token = DurableDeferred.tokenFromExecutionId(Confirmed, { workflow: Subscribe, executionId })
      yield* DurableDeferred.succeed(Confirmed, { token, value: "email" })
      const result = yield* eventually(Subscribe.poll(executionId), (r) =>
        Option.isSome(r) && r.value._tag === "Complete")
      expect(result).toEqual(
        Option.some(new Workflow.Complete({ exit: Exit.succeed("c-48 subscribed, confirmed by email") }))
      )
      expect(charges).toBe(1)
    }))
})
