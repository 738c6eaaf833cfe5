// The engine over the in-memory store (`PgWorkflowEngine.layerMemory`), on TestClock: the same
// runs, journal, fences and wakes as on PostgreSQL, with time moved by the test. A clock of 14
// days fires when the test moves the clock 14 days; nothing waits for real time.
import * as OutboxMemory from "@effect-durable/pg/OutboxMemory"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as WorkflowLimits from "@effect-durable/workflow/WorkflowLimits"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/testing/TestClock"
import * as Activity from "effect/workflow/Activity"
import * as DurableClock from "effect/workflow/DurableClock"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"

/**
 * Moves the TestClock by the engine's poll interval until `done` holds (at most `limit` steps): in
 * memory nothing NOTIFYs, so a run, or a clock due, is claimed at the projector's next poll.
 */
const until = <A, E, R>(effect: Effect.Effect<A, E, R>, done: (a: A) => boolean, limit = 200) =>
  Effect.gen(function*() {
    for (let step = 0; step < limit; step++) {
      const value = yield* effect
      if (done(value)) return value
      yield* TestClock.adjust("1 hour")
    }
    return yield* Effect.die(`condition not met after ${limit} steps of the TestClock`)
  })
const completed = <A, E>(result: Option.Option<Workflow.Result<A, E>>) =>
  Option.isSome(result) && result.value._tag === "Complete"
const suspended = <A, E>(result: Option.Option<Workflow.Result<A, E>>) =>
  Option.isSome(result) && result.value._tag === "Suspended"

const counts = { charges: 0, mails: 0, running: 0, most: 0 }

const Approved = DurableDeferred.make("Memory/Approved", { success: Schema.String })
const Trial = Workflow.make("Memory/Trial", {
  payload: { customer: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ customer }) => customer
})
const Child = Workflow.make("Memory/Child", {
  payload: { n: Schema.Number },
  success: Schema.Number,
  idempotencyKey: ({ n }) => String(n)
})
const Parent = Workflow.make("Memory/Parent", {
  payload: { n: Schema.Number },
  success: Schema.Number,
  idempotencyKey: ({ n }) => String(n)
})
const Limited = Workflow.make("Memory/Limited", {
  payload: { n: Schema.Number },
  idempotencyKey: ({ n }) => String(n)
})

const Workflows = Layer.mergeAll(
  Trial.toLayer(({ customer }) =>
    Effect.gen(function*() {
      yield* Activity.make({ name: "charge", execute: Effect.sync(() => void counts.charges++) })
      yield* DurableClock.sleep({ name: "trial", duration: "14 days" })
      const by = yield* DurableDeferred.await(Approved)
      yield* Activity.make({ name: "mail", execute: Effect.sync(() => void counts.mails++) })
      return `${customer} approved by ${by}`
    })
  ),
  Child.toLayer(({ n }) => Activity.make({ name: "double", success: Schema.Number, execute: Effect.succeed(n * 2) })),
  Parent.toLayer(({ n }) => Effect.map(Child.execute({ n }), (doubled) => doubled + 1)),
  Limited.toLayer(() =>
    Activity.make({
      name: "hold",
      execute: Effect.acquireUseRelease(
        Effect.sync(() => {
          counts.running++
          counts.most = Math.max(counts.most, counts.running)
        }),
        () => Effect.sleep("1 second"),
        () => Effect.sync(() => void counts.running--)
      )
    })
  )
)

describe("the engine in memory (PgWorkflowEngine.layerMemory) on TestClock", () => {
  it.layer(Workflows.pipe(Layer.provideMerge(PgWorkflowEngine.layerMemory({ pollInterval: "1 hour" }))))(
    (it) => {
      it.effect("a 14-day trial ends when the clock is moved 14 days, its charge made once across its suspensions", () =>
        Effect.gen(function*() {
          const executionId = yield* Trial.execute({ customer: "c-1" }, { discard: true })
          yield* until(Trial.poll(executionId), suspended)
          yield* TestClock.adjust("14 days")
          const token = DurableDeferred.tokenFromExecutionId(Approved, { workflow: Trial, executionId })
          yield* DurableDeferred.succeed(Approved, { token, value: "ops" })
          const result = yield* until(Trial.poll(executionId), completed)
          expect(result).toEqual(Option.some(new Workflow.Complete({ exit: Exit.succeed("c-1 approved by ops") })))
          expect(counts).toMatchObject({ charges: 1, mails: 1 })
          // Started again under its id: the first execution stands, nothing runs twice.
          expect(yield* Trial.execute({ customer: "c-1" }, { discard: true })).toBe(executionId)
          expect(yield* until(Trial.poll(executionId), completed)).toEqual(result)
          expect(counts).toMatchObject({ charges: 1, mails: 1 })
        }))

      it.effect("the trial's approval waits while its clock has not fired: the clock is durable, not a sleep", () =>
        Effect.gen(function*() {
          const executionId = yield* Trial.execute({ customer: "c-2" }, { discard: true })
          yield* until(Trial.poll(executionId), suspended)
          const token = DurableDeferred.tokenFromExecutionId(Approved, { workflow: Trial, executionId })
          yield* DurableDeferred.succeed(Approved, { token, value: "early" })
          // 13 days on: still suspended on the clock, the approval recorded and waiting.
          yield* TestClock.adjust("13 days")
          expect(yield* until(Trial.poll(executionId), suspended)).toSatisfy(suspended)
          yield* TestClock.adjust("1 day")
          expect(yield* until(Trial.poll(executionId), completed)).toEqual(
            Option.some(new Workflow.Complete({ exit: Exit.succeed("c-2 approved by early") }))
          )
        }))

      it.effect("a parent suspends on its child and completes with the child's result", () =>
        Effect.gen(function*() {
          const executionId = yield* Parent.execute({ n: 20 }, { discard: true })
          expect(yield* until(Parent.poll(executionId), completed)).toEqual(
            Option.some(new Workflow.Complete({ exit: Exit.succeed(41) }))
          )
        }))

      it.effect("a workflow's limit on the in-memory outbox holds its runs to it", () =>
        Effect.gen(function*() {
          const outbox = yield* OutboxMemory.OutboxMemory
          yield* outbox.setLimit(WorkflowLimits.topic(Limited), { maxInFlight: 2 })
          const ids = yield* Effect.forEach([1, 2, 3, 4, 5, 6], (n) => Limited.execute({ n }, { discard: true }))
          for (const id of ids) yield* until(Limited.poll(id), completed)
          expect(counts.most).toBe(2)
        }))
    }
  )
})
