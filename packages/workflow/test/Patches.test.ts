// Patches: a change guarded by `WorkflowPatch.patched` deployed under running executions (each
// "deploy" an engine layer of its own over one database, the earlier one closed). A run that
// older code took past the patch keeps the old branch on every replay; a new run takes the
// patched one and keeps it; the operator view says when the old branch can go.
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as WorkflowDeploys from "@effect-durable/workflow/WorkflowDeploys"
import * as WorkflowPatch from "@effect-durable/workflow/WorkflowPatch"
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Activity from "effect/workflow/Activity"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import type { WorkflowEngine } from "effect/workflow/WorkflowEngine"
import { countedSteps, orderWorkflow } from "./fixtures/deploys.js"

const { Confirmed, Order } = orderWorkflow("Patch")
const { counts: times, step } = countedSteps()

type Code = (payload: { readonly id: string }) => Effect.Effect<string, never, WorkflowEngine | any>

/** One deploy: the engine running `code` (deploy version `version`) for the length of `program`. */
const deployed = <A, E, R>(code: Code, version: string, program: Effect.Effect<A, E, R>) =>
  program.pipe(
    Effect.provide(
      Order.toLayer(code).pipe(
        Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "100 millis", replayWindow: "300 millis", version }))
      )
    )
  )

const suspended = (r: Option.Option<Workflow.Result<string, never>>) =>
  Option.isSome(r) && r.value._tag === "Suspended" && r.value.failed !== true
const complete = (r: Option.Option<Workflow.Result<string, never>>) => Option.isSome(r) && r.value._tag === "Complete"

/** Version 1: charge, wait for the confirmation, ship. */
const v1: Code = ({ id }) =>
  Effect.gen(function*() {
    yield* step(`charge-${id}`)
    const by = yield* DurableDeferred.await(Confirmed)
    yield* step(`ship-${id}`)
    return `charged, confirmed by ${by}`
  })

/** Version 2: a fraud check before the charge, guarded by a patch; the rest as before. */
const v2: Code = ({ id }) =>
  Effect.gen(function*() {
    const checked = yield* WorkflowPatch.ifPatched("fraud-check", {
      onTrue: () => Effect.as(Effect.andThen(step(`fraud-${id}`), step(`charge-${id}`)), "checked"),
      onFalse: () => Effect.as(step(`charge-${id}`), "unchecked")
    })
    const by = yield* DurableDeferred.await(Confirmed)
    yield* step(`ship-${id}`)
    return `${checked}, confirmed by ${by}`
  })

/** Starts an order under `code` and leaves it waiting for its confirmation. */
const startedUnder = (code: Code, version: string, id: string) =>
  deployed(
    code,
    version,
    Effect.gen(function*() {
      const executionId = yield* Order.execute({ id }, { discard: true })
      yield* eventually(Order.poll(executionId), suspended)
      return executionId
    })
  )
const confirm = (executionId: string) =>
  DurableDeferred.succeed(Confirmed, {
    token: DurableDeferred.tokenFromExecutionId(Confirmed, { workflow: Order, executionId }),
    value: "mail"
  })
const confirmedUnder = (code: Code, executionId: string) =>
  deployed(code, "v2", Effect.andThen(confirm(executionId), eventually(Order.poll(executionId), complete)))
const resultOf = (r: Option.Option<Workflow.Result<string, never>>) =>
  Option.isSome(r) && r.value._tag === "Complete" && Exit.isSuccess(r.value.exit) ? r.value.exit.value : undefined

const patchesOf = Effect.flatMap(WorkflowDeploys.make, (deploys) => deploys.patches(Order._tag))

describe("patches: a guarded change under running executions", () => {
  it.layer(TestSubstrate.layer(), { timeout: "120 seconds", excludeTestServices: true })((it) => {
    it.effect("a run older code took past the patch keeps the old branch; a new run takes the patched one and keeps it on every replay", () =>
      Effect.gen(function*() {
        const old = yield* startedUnder(v1, "v1", "old")
        const fresh = yield* startedUnder(v2, "v2", "new")
        expect(times("charge-old", "fraud-old", "charge-new", "fraud-new")).toEqual([1, 0, 1, 1])
        // The old run has not met the patch yet (no v2 process replayed it): undecided.
        expect(WorkflowDeploys.use(yield* patchesOf, "fraud-check")).toEqual({
          patch: "fraud-check",
          patched: 1,
          unpatched: 0,
          undecided: 1,
          droppable: false
        })
        // Both confirmed under version 2: the old run replays its charge on the old branch (no
        // fraud check, no second charge, no divergence); the new one replays the patched branch,
        // though its journal now holds steps beyond the patch.
        const oldResult = yield* confirmedUnder(v2, old)
        const newResult = yield* confirmedUnder(v2, fresh)
        expect([resultOf(oldResult), resultOf(newResult)]).toEqual([
          "unchecked, confirmed by mail",
          "checked, confirmed by mail"
        ])
        expect(times("charge-old", "fraud-old", "ship-old", "charge-new", "fraud-new", "ship-new")).toEqual([
          1,
          0,
          1,
          1,
          1,
          1
        ])
        const admin = yield* WorkflowAdmin.make
        const markers = (yield* admin.show(Order._tag, old))!.steps.filter((s) => s.kind === "patch")
        expect(markers).toEqual([expect.objectContaining({ name: "fraud-check", result: false })])
      }))

    it.effect("the operator view counts unfinished runs on each branch and says when the old one can be dropped", () =>
      Effect.gen(function*() {
        const old = yield* startedUnder(v1, "v1", "view-old")
        const fresh = yield* startedUnder(v2, "v2", "view-new")
        // The old one replayed under version 2 (a wake with nothing new) decides the old branch.
        yield* deployed(
          v2,
          "v2",
          Effect.gen(function*() {
            yield* Order.resume(old)
            yield* eventually(
              patchesOf,
              (report) => WorkflowDeploys.use(report, "fraud-check").unpatched > 0
            )
          })
        )
        const during = WorkflowDeploys.use(yield* patchesOf, "fraud-check")
        expect(during).toMatchObject({ unpatched: 1, droppable: false })
        expect(during.patched).toBeGreaterThanOrEqual(1)
        yield* confirmedUnder(v2, old)
        yield* confirmedUnder(v2, fresh)
        // Neither left unfinished: nothing holds the old branch.
        expect(WorkflowDeploys.use(yield* patchesOf, "fraud-check")).toEqual({
          patch: "fraud-check",
          patched: 0,
          unpatched: 0,
          undecided: 0,
          droppable: true
        })
        const versions = yield* Effect.flatMap(
          WorkflowDeploys.make,
          (deploys) => deploys.versions({ workflow: Order._tag })
        )
        expect(versions.every((v) => v.workflow === Order._tag && v.diverged === 0)).toBe(true)
      }))

    it.effect("a new run reaching a patch after a race replayed from its recorded winner takes the patched branch", () =>
      Effect.gen(function*() {
        // The race's arms are not asked again when it replays (its winner is recorded); the
        // confirmation may be recorded before the code asks for it. Neither was a step past the patch.
        const raced: Code = ({ id }) =>
          Effect.gen(function*() {
            yield* Activity.raceAll(`pick-${id}`, [step(`fast-${id}`), step(`fast2-${id}`)])
            const by = yield* DurableDeferred.await(Confirmed)
            const branch = yield* WorkflowPatch.ifPatched("after-race", {
              onTrue: () => Effect.as(step(`new-${id}`), "patched"),
              onFalse: () => Effect.as(step(`old-${id}`), "old")
            })
            return `${branch}, confirmed by ${by}`
          })
        const executionId = yield* startedUnder(raced, "v2", "race")
        const result = yield* confirmedUnder(raced, executionId)
        expect(resultOf(result)).toBe("patched, confirmed by mail")
        expect(times("new-race", "old-race")).toEqual([1, 0])
      }))

    it.effect("a patch id that breaks the rule, or a patch asked from an activity's body, is a defect naming it", () =>
      Effect.gen(function*() {
        const badId: Code = () => Effect.as(WorkflowPatch.patched("no spaces"), "never")
        const inActivity: Code = ({ id }) =>
          Effect.as(
            Activity.make({ name: `inner-${id}`, execute: Effect.asVoid(WorkflowPatch.patched("inner")) }),
            "never"
          )
        for (
          const [code, id, says] of [[badId, "bad", "a patch id is"], [
            inActivity,
            "act",
            "not from an activity's body"
          ]] as const
        ) {
          const exit = yield* deployed(
            code,
            "v2",
            Effect.gen(function*() {
              const executionId = yield* Order.execute({ id }, { discard: true })
              return yield* eventually(Order.poll(executionId), complete)
            })
          )
          expect(Option.isSome(exit) && exit.value._tag === "Complete" && Exit.isFailure(exit.value.exit)).toBe(true)
          if (Option.isSome(exit) && exit.value._tag === "Complete" && Exit.isFailure(exit.value.exit)) {
            expect(Cause.pretty(exit.value.exit.cause)).toContain(says)
          }
        }
      }))
  })
})
