/**
 * A registration joins the process's one run projector for the scope that registered it: its
 * runs keep what that scope gave them, closing it waits for them (up to the shutdown deadline,
 * then cuts them to replay elsewhere), and the workflow can register again afterwards.
 */
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Latch from "effect/Latch"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Activity from "effect/workflow/Activity"
import * as Workflow from "effect/workflow/Workflow"
import * as PgWorkflowEngine from "../src/PgWorkflowEngine.js"

/** A service each workflow is given by its own layer only. */
class Greeting extends Context.Service<Greeting, { readonly word: string; readonly released: () => boolean }>()(
  "test/Greeting"
) {}
const greeting = (word: string) =>
  Layer.effect(
    Greeting,
    Effect.gen(function*() {
      let released = false
      yield* Effect.addFinalizer(() => Effect.sync(() => void (released = true)))
      return Greeting.of({ word, released: () => released })
    })
  )

const greeter = (name: string) => {
  const workflow = Workflow.make(name, {
    payload: { id: Schema.String },
    success: Schema.String,
    idempotencyKey: ({ id }) => id
  })
  const state = { gate: Latch.makeUnsafe(true), started: 0, afterRelease: 0, cut: 0 }
  const layer = (word: string) =>
    workflow.toLayer(({ id }) =>
      Activity.make({
        name: "greet",
        success: Schema.String,
        execute: Effect.gen(function*() {
          state.started++
          const service = yield* Greeting
          yield* state.gate.await.pipe(Effect.onInterrupt(() => Effect.sync(() => void state.cut++)))
          if (service.released()) state.afterRelease++
          return `${service.word} ${id}`
        })
      })
    ).pipe(Layer.provide(greeting(word)))
  return { workflow, state, layer }
}

type Greeter = ReturnType<typeof greeter>["workflow"]
const completed = (workflow: Greeter, executionId: string) =>
  Effect.map(
    eventually(workflow.poll(executionId), (r) => r._tag === "Some" && r.value._tag === "Complete"),
    (r) => r._tag === "Some" && r.value._tag === "Complete" ? r.value.exit : undefined
  )

/** Builds `layer` in a scope of its own: the registration, closed by the returned effect. */
const registered = <E>(layer: Layer.Layer<never, E, any>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    yield* Layer.buildWithScope(layer, scope)
    return Scope.close(scope, Exit.void)
  })

const engine = PgWorkflowEngine.layer({ pollInterval: "100 millis", shutdownDeadline: "1 second" }).pipe(
  Layer.provideMerge(TestSubstrate.layer({ database: { applicationName: "workflow-registrations-test" } }))
)

describe("PgWorkflowEngine: registrations on the one run projector", () => {
  it.layer(engine, { excludeTestServices: true, timeout: "2 minutes" })((it) => {
    it.effect("each workflow's runs get the services its own layer gave it, not another's", () =>
      Effect.gen(function*() {
        const english = greeter("Reg/English")
        const french = greeter("Reg/French")
        const close = yield* registered(Layer.mergeAll(english.layer("hello"), french.layer("bonjour")))
        const [a, b] = [
          yield* english.workflow.execute({ id: "a" }, { discard: true }),
          yield* french.workflow.execute({ id: "b" }, { discard: true })
        ]
        expect(yield* completed(english.workflow, a)).toEqual(Exit.succeed("hello a"))
        expect(yield* completed(french.workflow, b)).toEqual(Exit.succeed("bonjour b"))
        yield* close
      }))

    it.effect("closing a registration waits for its runs under way; no run uses its services after their release", () =>
      Effect.gen(function*() {
        const slow = greeter("Reg/Slow")
        Latch.closeUnsafe(slow.state.gate)
        const close = yield* registered(slow.layer("hi"))
        const id = yield* slow.workflow.execute({ id: "s" }, { discard: true })
        yield* eventually(Effect.sync(() => slow.state.started), (n) => n === 1)
        const closing = yield* Effect.forkChild(close)
        // The close waits on the run: it ends only after the gate opens and the run settles.
        yield* Effect.yieldNow
        expect(closing.pollUnsafe()).toBeUndefined()
        yield* Latch.open(slow.state.gate)
        yield* Fiber.join(closing)
        expect(yield* completed(slow.workflow, id)).toEqual(Exit.succeed("hi s"))
        expect(slow.state.afterRelease).toBe(0)
      }))

    it.effect("a run still under way at the deadline is cut and replays at the next registration", () =>
      Effect.gen(function*() {
        const stuck = greeter("Reg/Stuck")
        Latch.closeUnsafe(stuck.state.gate)
        const close = yield* registered(stuck.layer("first"))
        const id = yield* stuck.workflow.execute({ id: "x" }, { discard: true })
        yield* eventually(Effect.sync(() => stuck.state.started), (n) => n === 1)
        yield* close
        expect([stuck.state.cut, stuck.state.afterRelease]).toEqual([1, 0])
        // Not registered here any more: a start is refused until it registers again.
        expect(Exit.isFailure(yield* Effect.exit(stuck.workflow.execute({ id: "y" }, { discard: true })))).toBe(true)
        yield* Latch.open(stuck.state.gate)
        const again = yield* registered(stuck.layer("second"))
        expect(yield* completed(stuck.workflow, id)).toEqual(Exit.succeed("second x"))
        yield* again
      }))
  })
})
