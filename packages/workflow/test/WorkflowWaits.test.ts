// What a suspended execution waits on, as its run records it and WorkflowAdmin shows it: a
// deferred by name, a durable clock with its due time, a child with its status, an operator's
// resume; and suspended executions counted by what they wait on.
import { InvalidInput } from "@effect-durable/core/Errors"
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Activity from "effect/workflow/Activity"
import * as DurableClock from "effect/workflow/DurableClock"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import * as DurableDeadline from "../src/DurableDeadline.js"
import * as PgWorkflowEngine from "../src/PgWorkflowEngine.js"
import * as WorkflowAdmin from "../src/WorkflowAdmin.js"

const Signed = DurableDeferred.make("Waits/Signed", { success: Schema.String })

const Contract = Workflow.make("Waits/Contract", {
  payload: { id: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ id }) => id
})
const ContractLayer = Contract.toLayer(() => DurableDeferred.await(Signed))

const CoolOff = Workflow.make("Waits/CoolOff", {
  payload: { id: Schema.String },
  success: Schema.Void,
  idempotencyKey: ({ id }) => id
})
const CoolOffLayer = CoolOff.toLayer(() =>
  DurableClock.sleep({ name: "cool-off", duration: "1 hour", inMemoryThreshold: "0 millis" })
)

const Deal = Workflow.make("Waits/Deal", {
  payload: { id: Schema.String, discardChild: Schema.Boolean },
  success: Schema.String,
  error: Schema.Union([DurableDeadline.DeadlinePassed, InvalidInput]),
  idempotencyKey: ({ id }) => id
})
const DealLayer = Deal.toLayer(({ discardChild, id }) =>
  Effect.gen(function*() {
    if (discardChild) {
      // Started and not awaited: not a wait of this execution.
      yield* Contract.execute({ id: `${id}-contract` }, { discard: true })
      return yield* DurableDeadline.awaitWithin(Signed, { within: "1 hour" })
    }
    return yield* Contract.execute({ id: `${id}-contract` })
  })
)

const Fragile = Workflow.make("Waits/Fragile", {
  payload: { id: Schema.String },
  idempotencyKey: ({ id }) => id
}).annotate(Workflow.SuspendOnFailure, true)
const FragileLayer = Fragile.toLayer(() => Activity.make({ name: "fail", execute: Effect.die("boom") }))

const layer = Layer.mergeAll(ContractLayer, CoolOffLayer, DealLayer, FragileLayer).pipe(
  Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "200 millis" })),
  Layer.provideMerge(TestSubstrate.layer({ database: { applicationName: "workflow-waits-test" } }))
)

const suspendedShow = (workflow: string, executionId: string) =>
  Effect.flatMap(
    WorkflowAdmin.make,
    (admin) => eventually(admin.show(workflow, executionId), (e) => e?.status === "suspended" && e.waitingOn !== null)
  )

describe("what a suspended execution waits on", () => {
  it.layer(layer, { excludeTestServices: true, timeout: "2 minutes" })((it) => {
    it.effect("a deferred, by name; cleared when the execution completes", () =>
      Effect.gen(function*() {
        const admin = yield* WorkflowAdmin.make
        const id = yield* Contract.execute({ id: "c-1" }, { discard: true })
        const shown = yield* suspendedShow(Contract._tag, id)
        expect(shown?.waitingOn).toEqual([{ kind: "deferred", name: "Waits/Signed" }])
        expect(shown?.waits).toEqual([{ kind: "deferred", name: "Waits/Signed" }])
        const token = DurableDeferred.tokenFromExecutionId(Signed, { workflow: Contract, executionId: id })
        yield* DurableDeferred.succeed(Signed, { token, value: "ann" })
        const done = yield* eventually(admin.show(Contract._tag, id), (e) => e?.status === "complete")
        expect(done?.waitingOn).toBeNull()
        expect(done?.waits).toBeNull()
      }))

    it.effect("a durable clock, with its due time on the database clock", () =>
      Effect.gen(function*() {
        const id = yield* CoolOff.execute({ id: "k-1" }, { discard: true })
        const shown = yield* suspendedShow(CoolOff._tag, id)
        expect(shown?.waitingOn).toEqual([{ kind: "clock", name: "cool-off" }])
        const [wait] = shown!.waits!
        expect(wait).toMatchObject({ kind: "clock", name: "cool-off" })
        const dueIn = Date.parse((wait as { dueAt: string }).dueAt) - Date.now()
        expect(dueIn).toBeGreaterThan(50 * 60_000)
        expect(dueIn).toBeLessThanOrEqual(60 * 60_000)
      }))

    it.effect("a child it awaits, with the child's status; the child says what it waits on", () =>
      Effect.gen(function*() {
        const id = yield* Deal.execute({ id: "d-1", discardChild: false }, { discard: true })
        yield* suspendedShow(Deal._tag, id)
        const childId = yield* Contract.executionId({ id: "d-1-contract" })
        expect((yield* suspendedShow(Contract._tag, childId))?.waitingOn).toEqual([
          { kind: "deferred", name: "Waits/Signed" }
        ])
        const shown = yield* Effect.flatMap(WorkflowAdmin.make, (admin) => admin.show(Deal._tag, id))
        expect(shown?.waitingOn).toEqual([{ kind: "child", workflow: Contract._tag, executionId: childId }])
        expect(shown?.waits).toEqual([
          { kind: "child", workflow: Contract._tag, executionId: childId, status: "suspended" }
        ])
      }))

    it.effect("a deferred awaited with a deadline: both the deferred and the deadline's clock; a child started and not awaited is not a wait", () =>
      Effect.gen(function*() {
        const id = yield* Deal.execute({ id: "d-2", discardChild: true }, { discard: true })
        const shown = yield* suspendedShow(Deal._tag, id)
        expect([...shown!.waitingOn!].sort((a, b) => a.kind.localeCompare(b.kind))).toEqual([
          { kind: "clock", name: "deadline/Waits/Signed" },
          { kind: "deferred", name: "Waits/Signed" }
        ])
      }))

    it.effect("a run that failed under SuspendOnFailure waits on an operator's resume", () =>
      Effect.gen(function*() {
        const id = yield* Fragile.execute({ id: "f-1" }, { discard: true })
        expect((yield* suspendedShow(Fragile._tag, id))?.waitingOn).toEqual([{ kind: "resume" }])
        const counts = yield* Effect.flatMap(WorkflowAdmin.make, (admin) => admin.waiting({ workflow: Fragile._tag }))
        expect(counts).toMatchObject([{ workflow: Fragile._tag, kind: "resume", name: "", executions: 1 }])
      }))

    it.effect("suspended executions counted by what they wait on", () =>
      Effect.gen(function*() {
        const admin = yield* WorkflowAdmin.make
        const ids = yield* Effect.forEach(["n-1", "n-2", "n-3"], (id) => Contract.execute({ id }, { discard: true }))
        for (const id of ids) yield* suspendedShow(Contract._tag, id)
        const counts = yield* admin.waiting({ workflow: Contract._tag })
        const signed = counts.find((c) => c.kind === "deferred" && c.name === "Waits/Signed")
        // The three here, and the contracts of the earlier cases still waiting (one completed).
        expect(signed?.executions).toBeGreaterThanOrEqual(3)
        const all = yield* admin.waiting()
        expect(all.find((c) => c.workflow === CoolOff._tag)).toMatchObject({
          kind: "clock",
          name: "cool-off",
          executions: 1
        })
        expect(all.find((c) => c.workflow === Deal._tag && c.kind === "child")).toMatchObject({
          name: Contract._tag,
          executions: 1
        })
        expect(yield* Effect.flip(admin.waiting({ workflow: "" }))).toBeInstanceOf(InvalidInput)
      }))
  })
})
