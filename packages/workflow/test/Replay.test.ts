// A replay test before deploy: journals written by real runs on PostgreSQL, taken from the
// database (`WorkflowReplay.histories`, as `workflows show --json` exports them), replayed
// against the next version of the code in memory. Code the journals support passes; code they
// do not fails with `ReplayDiverged` naming both sides; nothing past a journal runs.
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as WorkflowReplay from "@effect-durable/workflow/WorkflowReplay"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as TestClock from "effect/testing/TestClock"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import type { WorkflowEngine } from "effect/workflow/WorkflowEngine"
import { countedSteps, orderWorkflow } from "./fixtures/deploys.js"

const { Confirmed, Order } = orderWorkflow("Replay")
const { step, times } = countedSteps()

type Code = (payload: { readonly id: string }) => Effect.Effect<string, never, WorkflowEngine | any>

/** Version 1: charge, wait for the confirmation, ship. */
const v1: Code = ({ id }) =>
  Effect.gen(function*() {
    yield* step(`charge-${id}`)
    const by = yield* DurableDeferred.await(Confirmed)
    yield* step(`ship-${id}`)
    return `shipped, confirmed by ${by}`
  })
const renamed: Code = ({ id }) =>
  Effect.gen(function*() {
    yield* step(`chargeCard-${id}`)
    const by = yield* DurableDeferred.await(Confirmed)
    yield* step(`ship-${id}`)
    return `shipped, confirmed by ${by}`
  })
const appended: Code = (payload) => Effect.tap(v1(payload), () => step(`receipt-${payload.id}`))
const removed: Code = () => Effect.map(DurableDeferred.await(Confirmed), (by) => `confirmed by ${by}, never charged`)

/** Runs under version 1 on PostgreSQL: one waiting for its confirmation, one complete. */
const recorded = Effect.gen(function*() {
  const waiting = yield* Order.execute({ id: "w" }, { discard: true })
  const done = yield* Order.execute({ id: "d" }, { discard: true })
  yield* DurableDeferred.succeed(Confirmed, {
    token: DurableDeferred.tokenFromExecutionId(Confirmed, { workflow: Order, executionId: done }),
    value: "mail"
  })
  yield* eventually(Order.poll(done), (r) => Option.isSome(r) && r.value._tag === "Complete")
  yield* eventually(Order.poll(waiting), (r) => Option.isSome(r) && r.value._tag === "Suspended")
  // Exported as the CLI prints them, and read back.
  const histories = yield* WorkflowReplay.histories({ workflow: Order._tag, limit: 10 })
  return JSON.parse(JSON.stringify(histories)) as ReadonlyArray<unknown>
}).pipe(
  Effect.provide(Order.toLayer(v1).pipe(Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "100 millis" }))))
)

/** The charge step of order "w" as the database holds it (the first test recorded it). */
const recordedCharge = Effect.map(
  WorkflowReplay.histories({ workflow: Order._tag, limit: 10 }),
  (histories) => histories.find((h) => (h.payload as { id: string }).id === "w")!.steps[0]!
)

/** Replays `histories` against `code`, in memory. */
const replayedUnder = (code: Code, histories: ReadonlyArray<unknown>) =>
  WorkflowReplay.replayAll(histories).pipe(
    Effect.provide(Order.toLayer(code).pipe(Layer.provideMerge(WorkflowReplay.layer())))
  )

describe("a replay test before deploy", () => {
  it.layer(TestSubstrate.layer(), { timeout: "120 seconds", excludeTestServices: true })((it) => {
    it.effect("journals from the database replay against compatible code and fail naming both sides against code they do not support; nothing past a journal runs", () =>
      Effect.gen(function*() {
        const histories = yield* recorded
        expect(histories).toHaveLength(2)
        const before = [times("charge-w"), times("charge-d"), times("ship-d")]
        expect(before).toEqual([1, 1, 1])

        // The same code, and code that appends a step: both pass; the appended receipt never runs.
        const same = yield* replayedUnder(v1, histories)
        expect(same.map((r) => r.outcome).sort()).toEqual(["complete", "suspended"])
        yield* replayedUnder(appended, histories)
        expect([times("receipt-d"), times("receipt-w")]).toEqual([0, 0])

        // A renamed step: the first journal that holds it fails, naming both sides.
        const renaming = yield* Effect.flip(replayedUnder(renamed, histories))
        expect(renaming._tag).toBe("ReplayDiverged")
        if (renaming._tag === "ReplayDiverged") {
          expect(renaming.step).toMatch(/^activity chargeCard-[wd]$/)
          expect(renaming.unreached).toContain(renaming.step.replace("chargeCard", "charge"))
          expect(renaming.message).toContain("diverges")
        }
        // Removed steps: the complete run's journal holds a charge and a shipment the code never asks for.
        const removing = yield* Effect.flip(
          replayedUnder(removed, histories.filter((h) => (h as { executionId: string }).executionId !== "w"))
        )
        expect(removing).toMatchObject({
          _tag: "ReplayDiverged",
          step: "the run's end",
          unreached: [
            "activity charge-d",
            "activity ship-d"
          ]
        })
        // Under a test clock nobody moves, as in a plain `it.effect`: the replay keeps its own time.
        const underTestClock = yield* replayedUnder(v1, histories).pipe(Effect.provide(TestClock.layer()))
        expect(underTestClock).toHaveLength(2)
        // Nothing ran again: the replays answered from the journals.
        expect([times("charge-w"), times("charge-d"), times("ship-d"), times("ship-w")]).toEqual([...before, 0])
        expect([times("chargeCard-w"), times("chargeCard-d")]).toEqual([0, 0])
      }))

    it.effect("code that cannot replay a journal at all fails with ReplayFailed saying why: a payload it cannot decode, a defect", () =>
      Effect.gen(function*() {
        const history = { workflow: Order._tag, executionId: "p", payload: { id: 7 }, steps: [] }
        const undecodable = yield* Effect.flip(replayedUnder(v1, [history]))
        expect(undecodable).toMatchObject({ _tag: "ReplayFailed", executionId: "p" })
        expect(undecodable.message).toContain("payload does not decode")
        const dying: Code = ({ id }) => Effect.andThen(step(`charge-${id}`), Effect.die("the new code cannot go on"))
        const journal = [{
          workflow: Order._tag,
          executionId: "x",
          payload: { id: "w" },
          steps: [(yield* recordedCharge) as object]
        }]
        const died = yield* Effect.flip(replayedUnder(dying, journal))
        expect(died).toMatchObject({ _tag: "ReplayFailed", executionId: "x" })
        expect(died.message).toContain("dies")
      }))

    it.effect("what is not a history, or names a workflow not registered beside the replay layer, is InvalidInput naming the rule", () =>
      Effect.gen(function*() {
        const bad = yield* Effect.flip(replayedUnder(v1, [{ workflow: Order._tag, steps: "none" }]))
        expect(bad).toMatchObject({ _tag: "InvalidInput", argument: "history" })
        const unknown = yield* Effect.flip(
          replayedUnder(v1, [{ workflow: "Nobody", executionId: "x", payload: {}, steps: [] }])
        )
        expect(unknown).toMatchObject({ _tag: "InvalidInput", argument: "history.workflow" })
      }))
  })
})
