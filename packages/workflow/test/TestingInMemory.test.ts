// docs/testing.md "Workflows in memory": the same engine over the in-memory store, on the
// TestClock: a week-long trial tested in milliseconds, no database. In memory nothing
// NOTIFYs: a run, or a clock that came due, is claimed at the engine's next poll, so the test
// moves the clock by the poll interval while it waits (`until`).
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import { expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/testing/TestClock"
import * as Activity from "effect/workflow/Activity"
import * as DurableClock from "effect/workflow/DurableClock"
import * as Workflow from "effect/workflow/Workflow"

const Trial = Workflow.make("Guide/Trial", {
  payload: { customer: Schema.String },
  idempotencyKey: ({ customer }) => customer
})

let reminders = 0
const TrialLayer = Trial.toLayer(() =>
  Effect.gen(function*() {
    yield* DurableClock.sleep({ name: "trial", duration: "7 days" })
    yield* Activity.make({ name: "remind", execute: Effect.sync(() => void reminders++) })
  })
)

/** Moves the TestClock a poll interval at a time until `done` holds. */
const until = <A, E, R>(effect: Effect.Effect<A, E, R>, done: (a: A) => boolean) =>
  Effect.gen(function*() {
    for (let step = 0; step < 100; step++) {
      const value = yield* effect
      if (done(value)) return value
      yield* TestClock.adjust("1 hour")
    }
    return yield* Effect.die("not done after 100 polls")
  })

it.layer(TrialLayer.pipe(Layer.provideMerge(PgWorkflowEngine.layerMemory({ pollInterval: "1 hour" }))))((it) => {
  it.effect("the customer is reminded once, when the week's trial is over", () =>
    Effect.gen(function*() {
      const executionId = yield* Trial.execute({ customer: "c-7" }, { discard: true })
      yield* until(Trial.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Suspended")
      expect(reminders).toBe(0)
      yield* TestClock.adjust("7 days")
      yield* until(Trial.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Complete")
      expect(reminders).toBe(1)
    }))
})
