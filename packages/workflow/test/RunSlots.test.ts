/**
 * A run blocked in an activity holds a slot of the process's run projector, not a claim loop:
 * runs that arrive one at a time and each block still run up to the engine's `concurrency` at
 * once. Every workflow of a process shares that one projector: its slots, and its connections.
 */
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Latch from "effect/Latch"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
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

/** Six workflows, each a body that blocks in its activity until `shared` opens. */
let sharedActive = 0
let sharedMost = 0
const shared = Latch.makeUnsafe(false)
const Many = Array.from({ length: 6 }, (_, i) =>
  Workflow.make(`RunSlots/Many${i}`, {
    payload: { n: Schema.Number },
    idempotencyKey: ({ n }) => String(n)
  }))
const ManyLayers = Layer.mergeAll(
  ...Many.map((workflow) =>
    workflow.toLayer(() =>
      Activity.make({
        name: "call",
        execute: Effect.gen(function*() {
          sharedActive++
          sharedMost = Math.max(sharedMost, sharedActive)
          yield* shared.await
          sharedActive--
        })
      })
    )
  ) as [Layer.Layer<never>, ...Array<Layer.Layer<never>>]
)

describe("PgWorkflowEngine: one projector for every workflow of a process", () => {
  it.layer(
    ManyLayers.pipe(
      // A short lease: the keeper's connection opens at its first renewal, a second in.
      Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "100 millis", concurrency: 4, lease: "3 seconds" })),
      Layer.provideMerge(TestSubstrate.layer({ database: { applicationName: "workflow-one-projector-test" } }))
    ),
    { excludeTestServices: true, timeout: "2 minutes" }
  )((it) => {
    it.effect("six workflows: one LISTEN and one lease keeper connection, and the engine's concurrency shared by all", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ids = yield* Effect.forEach(Many, (workflow) => workflow.execute({ n: 1 }, { discard: true }))
        yield* eventually(Effect.sync(() => sharedActive), (a) => a === 4)
        // The listener connects at once; the keeper's pool at its first renewal (a second in).
        const connections = sql<{ application_name: string; n: number }>`
          SELECT application_name, count(*)::int AS n FROM pg_stat_activity
           WHERE datname = current_database()
             AND application_name IN ('effect-durable-listener', 'effect-durable-keeper')
           GROUP BY application_name`.pipe(
          Effect.orDie,
          Effect.map((rows) =>
            ["effect-durable-listener", "effect-durable-keeper"].map((name) =>
              rows.find((row) => row.application_name === name)?.n ?? 0
            )
          )
        )
        expect(yield* eventually(connections, ([listeners, keepers]) => listeners === 1 && keepers === 1)).toEqual([
          1,
          1
        ])
        yield* Latch.open(shared)
        yield* Effect.forEach(
          Many,
          (workflow, i) => eventually(workflow.poll(ids[i]!), (p) => p._tag === "Some" && p.value._tag === "Complete")
        )
        // Four at once across the six workflows, the last two after slots were freed.
        expect(sharedMost).toBe(4)
      }))
  })
})
