/**
 * A run blocked in an activity holds a slot of its workflow's projector, not a claim loop: runs
 * that arrive one at a time and each block still run up to the engine's `concurrency` at once.
 */
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Latch from "effect/Latch"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Activity from "effect/workflow/Activity"
import * as Workflow from "effect/workflow/Workflow"
import * as PgWorkflowEngine from "../src/PgWorkflowEngine.js"

let active = 0
let most = 0
const gate = Latch.makeUnsafe(false)

const Slow = Workflow.make("RunSlots/Slow", {
  payload: { n: Schema.Number },
  success: Schema.Number,
  idempotencyKey: ({ n }) => String(n)
})
const SlowLayer = Slow.toLayer(({ n }) =>
  Activity.make({
    name: "call",
    success: Schema.Number,
    execute: Effect.gen(function*() {
      active++
      most = Math.max(most, active)
      yield* gate.await
      active--
      return n
    })
  })
)

const layer = SlowLayer.pipe(
  Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "100 millis", concurrency: 8 })),
  Layer.provideMerge(TestSubstrate.layer({ database: { applicationName: "workflow-run-slots-test" } }))
)

describe("PgWorkflowEngine: run slots", () => {
  it.layer(layer, { excludeTestServices: true, timeout: "2 minutes" })((it) => {
    it.effect("runs that arrive one at a time and each block run up to concurrency at once, never more", () =>
      Effect.gen(function*() {
        const ids: Array<string> = []
        // Each start waits until the run before it is blocked: no two come in one claim.
        for (let n = 0; n < 10; n++) {
          ids.push(yield* Slow.execute({ n }, { discard: true }))
          if (n < 8) yield* eventually(Effect.sync(() => active), (a) => a === n + 1)
        }
        expect(active).toBe(8)
        yield* Latch.open(gate)
        const results = yield* Effect.forEach(
          ids,
          (id) => eventually(Slow.poll(id), (p) => p._tag === "Some" && p.value._tag === "Complete")
        )
        expect(results.length).toBe(10)
        // Eight at once (concurrency), the last two after a slot was freed.
        expect(most).toBe(8)
      }))
  })
})
