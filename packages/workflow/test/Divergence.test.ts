// Deploys under running workflows: one execution started under one version of the code replays
// under the next, on the same database (each "deploy" an engine layer of its own, the earlier
// one closed). A change the journal supports runs on; one it does not stops the run, diverged,
// with both sides named, before anything recorded runs again or a wrong result is returned.
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as WorkflowDeploys from "@effect-durable/workflow/WorkflowDeploys"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Activity from "effect/workflow/Activity"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import type { WorkflowEngine } from "effect/workflow/WorkflowEngine"
import { countedSteps, orderWorkflow } from "./fixtures/deploys.js"

const { Confirmed, Order } = orderWorkflow("Deploy")
const { step, times } = countedSteps()

/** One deploy: the engine running `code` (of deploy version `version`) for the length of `program`. */
const deployed = <A, E>(
  code: (payload: { readonly id: string }) => Effect.Effect<string, never, WorkflowEngine | any>,
  program: Effect.Effect<A, E, WorkflowEngine>,
  version = "v2"
) =>
  program.pipe(
    Effect.provide(
      Order.toLayer(code).pipe(
        Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "100 millis", replayWindow: "300 millis", version }))
      )
    )
  )

const suspendedOn = (failed: boolean) => (r: Option.Option<Workflow.Result<string, never>>) =>
  Option.isSome(r) && r.value._tag === "Suspended" && (r.value.failed === true) === failed
const complete = (r: Option.Option<Workflow.Result<string, never>>) => Option.isSome(r) && r.value._tag === "Complete"

/** Version 1: charge, wait for the confirmation, ship. */
const v1 = ({ id }: { readonly id: string }) =>
  Effect.gen(function*() {
    yield* step(`charge-${id}`)
    const by = yield* DurableDeferred.await(Confirmed)
    yield* step(`ship-${id}`)
    return `shipped, confirmed by ${by}`
  })

/** Starts an order under `code` and leaves it waiting for its confirmation. */
const startedUnder = (code: Parameters<typeof deployed>[0], id: string) =>
  deployed(
    code,
    Effect.gen(function*() {
      const executionId = yield* Order.execute({ id }, { discard: true })
      yield* eventually(Order.poll(executionId), suspendedOn(false))
      return executionId
    }),
    "v1"
  )
/** Starts an order under version 1 (charge recorded, waiting for its confirmation). */
const startedUnderV1 = (id: string) =>
  Effect.tap(startedUnder(v1, id), () => Effect.sync(() => expect(times(`charge-${id}`)).toBe(1)))
const confirm = (executionId: string) =>
  DurableDeferred.succeed(Confirmed, {
    token: DurableDeferred.tokenFromExecutionId(Confirmed, { workflow: Order, executionId }),
    value: "mail"
  })

/** Deploys `code`, confirms the order and waits until its result satisfies `until`. */
const confirmedUnder = (
  code: Parameters<typeof deployed>[0],
  executionId: string,
  until: (r: Option.Option<Workflow.Result<string, never>>) => boolean
) => deployed(code, Effect.andThen(confirm(executionId), eventually(Order.poll(executionId), until)))

describe("deploying workflow code under running executions", () => {
  it.layer(TestSubstrate.layer(), { timeout: "120 seconds", excludeTestServices: true })((it) => {
    it.effect("a renamed step diverges: the new name never runs, the run stops naming both sides, and resumes under code that agrees", () =>
      Effect.gen(function*() {
        const executionId = yield* startedUnderV1("r")
        // Version 2 renamed the charge: replaying, it would charge again under the new name.
        const renamed = ({ id }: { readonly id: string }) =>
          Effect.gen(function*() {
            yield* step(`chargeCard-${id}`)
            const by = yield* DurableDeferred.await(Confirmed)
            yield* step(`ship-${id}`)
            return `shipped, confirmed by ${by}`
          })
        yield* confirmedUnder(renamed, executionId, suspendedOn(true))
        expect([times("chargeCard-r"), times("charge-r"), times("ship-r")]).toEqual([0, 1, 0])
        const shown = yield* Effect.flatMap(WorkflowAdmin.make, (admin) => admin.show(Order._tag, executionId))
        expect(shown?.waits).toEqual([{
          kind: "diverged",
          step: "activity chargeCard-r",
          unreached: ["activity charge-r"]
        }])
        // The version it started under, as recorded at its start.
        expect(shown?.version).toBe("v1")
        expect(WorkflowAdmin.describeWait(shown!.waits![0]!)).toContain("chargeCard-r")
        const counted = yield* Effect.flatMap(WorkflowAdmin.make, (admin) => admin.waiting({ workflow: Order._tag }))
        expect(counted).toContainEqual(expect.objectContaining({ kind: "diverged", name: "activity chargeCard-r" }))
        // Version 1 back (the rename rolled back), and an operator's resume: it ships, charged once.
        const result = yield* deployed(
          v1,
          Effect.gen(function*() {
            yield* Order.resume(executionId)
            return yield* eventually(Order.poll(executionId), complete)
          })
        )
        expect(result).toEqual(Option.some(expect.objectContaining({ _tag: "Complete" })))
        expect([times("charge-r"), times("ship-r"), times("chargeCard-r")]).toEqual([1, 1, 0])
      }))

    it.effect("steps appended after the last recorded one are compatible: the run goes on", () =>
      Effect.gen(function*() {
        const executionId = yield* startedUnderV1("a")
        const appended = ({ id }: { readonly id: string }) =>
          Effect.gen(function*() {
            const shipped = yield* v1({ id })
            yield* step(`receipt-${id}`)
            return shipped
          })
        yield* confirmedUnder(appended, executionId, complete)
        expect([times("charge-a"), times("ship-a"), times("receipt-a")]).toEqual([1, 1, 1])
      }))

    it.effect("a recorded step asked after a new one beside it (concurrent branches) is not a divergence", () =>
      Effect.gen(function*() {
        const executionId = yield* startedUnderV1("c")
        // The charge and a new audit step side by side: the audit is asked first.
        const beside = ({ id }: { readonly id: string }) =>
          Effect.gen(function*() {
            yield* Effect.all([step(`audit-${id}`), step(`charge-${id}`)], { concurrency: 2 })
            const by = yield* DurableDeferred.await(Confirmed)
            yield* step(`ship-${id}`)
            return `shipped, confirmed by ${by}`
          })
        yield* confirmedUnder(beside, executionId, complete)
        expect([times("charge-c"), times("audit-c"), times("ship-c")]).toEqual([1, 1, 1])
      }))

    it.effect("a recorded failure replayed is not a divergence: the siblings a fail-fast Effect.all cut off count for nothing", () =>
      Effect.gen(function*() {
        // The first time both branches record: the reservation at once, then the charge's failure.
        const failFast = ({ id }: { readonly id: string }) =>
          Effect.gen(function*() {
            const charge = Activity.make({
              name: `decline-${id}`,
              error: Schema.String,
              execute: Effect.andThen(Effect.sleep("50 millis"), Effect.fail("declined"))
            })
            const declined = yield* Effect.all([charge, step(`reserve-${id}`)], { concurrency: 2 }).pipe(
              Effect.as(false),
              Effect.catch(() => Effect.succeed(true))
            )
            const by = yield* DurableDeferred.await(Confirmed)
            yield* step(`ship-${id}`)
            return `${declined ? "declined" : "charged"}, confirmed by ${by}`
          })
        const executionId = yield* startedUnder(failFast, "f")
        expect(times("reserve-f")).toBe(1)
        // Replayed, the recorded failure returns at once and the reservation is never asked again.
        yield* confirmedUnder(failFast, executionId, complete)
        expect([times("reserve-f"), times("ship-f")]).toEqual([1, 1])
      }))

    it.effect("a removed step diverges at the end: the run does not complete on a journal that says otherwise", () =>
      Effect.gen(function*() {
        const executionId = yield* startedUnderV1("e")
        const removed = () => Effect.map(DurableDeferred.await(Confirmed), (by) => `confirmed by ${by}, never charged`)
        yield* confirmedUnder(removed, executionId, suspendedOn(true))
        const shown = yield* Effect.flatMap(WorkflowAdmin.make, (admin) => admin.show(Order._tag, executionId))
        expect(shown?.status).toBe("suspended")
        expect(shown?.waits).toEqual([{ kind: "diverged", step: "the run's end", unreached: ["activity charge-e"] }])
      }))

    it.effect("a race whose winner the journal holds replays without its arms: not a divergence", () =>
      Effect.gen(function*() {
        const raced = ({ id }: { readonly id: string }) =>
          Effect.gen(function*() {
            yield* Activity.raceAll(`pick-${id}`, [step(`fast-${id}`), step(`fast2-${id}`)])
            const by = yield* DurableDeferred.await(Confirmed)
            yield* step(`ship-${id}`)
            return `shipped, confirmed by ${by}`
          })
        const executionId = yield* startedUnder(raced, "q")
        yield* confirmedUnder(raced, executionId, complete)
        expect(times("ship-q")).toBe(1)
      }))
    it.effect("a fork restarts a run from a chosen step: the journal before it kept, that step and what follows run again, the original untouched", () =>
      Effect.gen(function*() {
        const executionId = yield* startedUnderV1("k")
        yield* confirmedUnder(v1, executionId, complete)
        expect([times("charge-k"), times("ship-k")]).toEqual([1, 1])
        const deploys = yield* WorkflowDeploys.make
        const forked = yield* deploys.fork({
          workflow: Order._tag,
          executionId,
          from: { kind: "activity", name: "ship-k" },
          as: "k-again"
        })
        expect(forked).toBe("k-again")
        // Run by version 1's code: the charge and the confirmation replay from the copied journal.
        const result = yield* deployed(v1, eventually(Order.poll("k-again"), complete))
        expect(result).toEqual(Option.some(expect.objectContaining({ _tag: "Complete" })))
        expect([times("charge-k"), times("ship-k")]).toEqual([1, 2])
        const admin = yield* WorkflowAdmin.make
        expect((yield* admin.show(Order._tag, executionId))?.status).toBe("complete")
        // A step the journal does not hold, an id taken: refused, naming the rule; an unknown execution: nothing.
        const missing = yield* Effect.flip(
          deploys.fork({ workflow: Order._tag, executionId, from: { kind: "activity", name: "nope" } })
        )
        expect(missing).toMatchObject({ _tag: "InvalidInput", argument: "from" })
        const taken = yield* Effect.flip(
          deploys.fork({ workflow: Order._tag, executionId, from: { kind: "activity", name: "ship-k" }, as: "k-again" })
        )
        expect(taken).toMatchObject({ _tag: "InvalidInput", argument: "as" })
        expect(
          yield* deploys.fork({ workflow: Order._tag, executionId: "unknown", from: { kind: "activity", name: "x" } })
        ).toBeUndefined()
      }))
  })
})
