// The storage contract (`WorkflowStore`) held by both drivers, the same cases against each:
// PostgreSQL (a fresh, migrated database) and memory (`OutboxMemory`). A case that one driver
// passes and the other fails is a driver that breaks the contract the engine relies on.
import * as OutboxMemory from "@effect-durable/pg/OutboxMemory"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as WorkflowStore from "@effect-durable/workflow/WorkflowStore"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

/** What each case asks for: the store, and the outbox worker that claims its run messages. */
type Driver = Layer.Layer<WorkflowStore.WorkflowStore | OutboxWorker.OutboxWorker, unknown>
const drivers: ReadonlyArray<{ readonly name: string; readonly layer: Driver }> = [
  { name: "PostgreSQL", layer: WorkflowStore.layer.pipe(Layer.provideMerge(TestSubstrate.layer())) },
  { name: "memory", layer: WorkflowStore.layerMemory.pipe(Layer.provideMerge(OutboxMemory.layer())) }
]

let ids = 0
const fresh = () => ({ workflow: "Contract/W", executionId: `e-${++ids}` })
const start = (
  workflow: string,
  executionId: string,
  payload: unknown = { n: 1 },
  pinnedTo: string | undefined = undefined
) =>
  Effect.flatMap(
    WorkflowStore.WorkflowStore,
    (store) =>
      store.start({
        workflow,
        executionId,
        payload,
        parent: undefined,
        attributes: {},
        group: undefined,
        version: pinnedTo,
        pinned: pinnedTo !== undefined
      })
  )
/** Claims the execution's run message, as the run projector does. */
const claimRun = (workflow: string, executionId: string, topic = `workflow.run:${workflow}`) =>
  Effect.gen(function*() {
    const worker = yield* OutboxWorker.OutboxWorker
    const claimed = yield* Effect.orDie(
      worker.claim({ worker: "contract", topics: [topic], limit: 1000, lease: "1 minute" })
    )
    const message = claimed.find((m) => (m.payload as { executionId: string }).executionId === executionId)
    if (message === undefined) return yield* Effect.die(`no run message of ${executionId}`)
    return message.claim
  })

for (const driver of drivers) {
  describe(`the workflow store contract: ${driver.name}`, () => {
    it.layer(driver.layer, { timeout: "60 seconds" })((it) => {
      it.effect("a start is written once: the same id again starts nothing, another payload is a mismatch", () =>
        Effect.gen(function*() {
          const store = yield* WorkflowStore.WorkflowStore
          const { executionId, workflow } = fresh()
          expect(yield* start(workflow, executionId)).toEqual({ started: true, mismatch: false })
          expect(yield* start(workflow, executionId)).toEqual({ started: false, mismatch: false })
          expect(yield* start(workflow, executionId, { n: 2 })).toEqual({ started: false, mismatch: true })
          expect(yield* store.read(workflow, executionId)).toMatchObject({ status: "pending", payload: { n: 1 } })
        }))

      it.effect("starts at once (batched on PostgreSQL): each id started once with one run message, every start with another payload a mismatch", () =>
        Effect.gen(function*() {
          const store = yield* WorkflowStore.WorkflowStore
          const workflow = `Contract/Many-${++ids}`
          // 40 ids, each started 3 times at once: twice with payload 1, once with payload 2.
          const asks = Array.from({ length: 120 }, (_, i) => ({ id: `m-${i % 40}`, n: i < 80 ? 1 : 2 }))
          const answers = yield* Effect.forEach(asks, ({ id, n }) => start(workflow, id, { n }), {
            concurrency: "unbounded"
          })
          const startedIds = asks.filter((_, i) => answers[i]!.started).map((ask) => ask.id)
          expect(startedIds.sort()).toEqual([...new Set(asks.map((ask) => ask.id))].sort())
          // Each id's stored payload is the one its start wrote; the other payload's starts are mismatches.
          for (let i = 0; i < asks.length; i++) {
            const row = yield* store.read(workflow, asks[i]!.id)
            expect(answers[i]!.mismatch).toBe(!answers[i]!.started && (row?.payload as { n: number }).n !== asks[i]!.n)
          }
          const worker = yield* OutboxWorker.OutboxWorker
          const claimed = yield* Effect.orDie(
            worker.claim({ worker: "contract", topics: [`workflow.run:${workflow}`], limit: 1000, lease: "1 minute" })
          )
          expect(claimed.map((m) => (m.payload as { executionId: string }).executionId).sort()).toEqual(
            startedIds.sort()
          )
        }))

      it.effect("a pinned execution's runs go to its version's topic: its start, a rerun settle, a wake", () =>
        Effect.gen(function*() {
          const store = yield* WorkflowStore.WorkflowStore
          const worker = yield* OutboxWorker.OutboxWorker
          const { executionId } = fresh()
          const workflow = `Contract/Pinned-${++ids}`
          const pinnedTopic = `workflow.run:${workflow}@v7`
          yield* start(workflow, executionId, { n: 1 }, "v7")
          const unpinned = yield* Effect.orDie(
            worker.claim({ worker: "contract", topics: [`workflow.run:${workflow}`], limit: 10, lease: "1 minute" })
          )
          expect(unpinned).toEqual([])
          const suspend = (claim: Effect.Success<ReturnType<typeof claimRun>>, rerun: boolean) =>
            Effect.flatMap(store.beginRun(workflow, executionId), (begun) =>
              store.settle({
                workflow,
                executionId,
                claim,
                wakeSeq: begun!.wakeSeq,
                result: { _tag: "Suspended" },
                complete: false,
                failed: false,
                rerun,
                waits: []
              }))
          const first = yield* claimRun(workflow, executionId, pinnedTopic)
          expect(yield* suspend(first, true)).toEqual({ fenced: true, status: "pending" })
          yield* Effect.orDie(worker.markProjected(first))
          const second = yield* claimRun(workflow, executionId, pinnedTopic)
          expect(yield* suspend(second, false)).toEqual({ fenced: true, status: "suspended" })
          yield* Effect.orDie(worker.markProjected(second))
          yield* store.wake(workflow, executionId, "explicit")
          yield* claimRun(workflow, executionId, pinnedTopic)
        }))

      it.effect("a step's first record stands; a run begins with the journal as it stands", () =>
        Effect.gen(function*() {
          const store = yield* WorkflowStore.WorkflowStore
          const { executionId, workflow } = fresh()
          yield* start(workflow, executionId)
          const first = yield* store.recordStep(workflow, executionId, "activity", "charge", 1, { paid: 1 })
          const second = yield* store.recordStep(workflow, executionId, "activity", "charge", 1, { paid: 2 })
          expect([first, second]).toEqual([{ inserted: true, result: { paid: 1 } }, {
            inserted: false,
            result: { paid: 1 }
          }])
          const begun = yield* store.beginRun(workflow, executionId)
          expect(begun?.row.status).toBe("running")
          expect(begun?.steps).toEqual([
            { kind: "activity", name: "charge", attempt: 1, result: { paid: 1 }, recorded: expect.any(Number) }
          ])
        }))

      it.effect("a settle writes only while its run message's claim holds: another claim writes nothing", () =>
        Effect.gen(function*() {
          const store = yield* WorkflowStore.WorkflowStore
          const { executionId, workflow } = fresh()
          yield* start(workflow, executionId)
          const claim = yield* claimRun(workflow, executionId)
          const begun = yield* store.beginRun(workflow, executionId)
          const settle = (by: typeof claim) =>
            store.settle({
              workflow,
              executionId,
              claim: by,
              wakeSeq: begun!.wakeSeq,
              result: { done: true },
              complete: true,
              failed: false,
              rerun: false,
              waits: []
            })
          expect(yield* settle({ ...claim, generation: claim.generation + 1 })).toEqual({
            fenced: false,
            status: undefined
          })
          expect((yield* store.read(workflow, executionId))?.status).toBe("running")
          expect(yield* settle(claim)).toEqual({ fenced: true, status: "complete" })
          expect(yield* store.read(workflow, executionId)).toMatchObject({ status: "complete", result: { done: true } })
          // Complete: nothing begins again.
          expect(yield* store.beginRun(workflow, executionId)).toBeUndefined()
        }))

      it.effect("a deferred recorded wakes a suspended execution; one suspended on its failure waits for a resume", () =>
        Effect.gen(function*() {
          const store = yield* WorkflowStore.WorkflowStore
          const suspend = (failed: boolean) =>
            Effect.gen(function*() {
              const { executionId, workflow } = fresh()
              yield* start(workflow, executionId)
              const claim = yield* claimRun(workflow, executionId)
              const begun = yield* store.beginRun(workflow, executionId)
              const settled = yield* store.settle({
                workflow,
                executionId,
                claim,
                wakeSeq: begun!.wakeSeq,
                result: { _tag: "Suspended", failed },
                complete: false,
                failed,
                rerun: false,
                waits: failed ? [{ kind: "resume" }] : [{ kind: "deferred", name: "Approved" }]
              })
              expect(settled).toEqual({ fenced: true, status: "suspended" })
              // The run's message marked, as the projector marks it: the execution's next one may be claimed.
              yield* Effect.orDie(Effect.flatMap(OutboxWorker.OutboxWorker, (worker) => worker.markProjected(claim)))
              yield* store.recordStep(workflow, executionId, "deferred", "Approved", 0, { ok: true })
              return { executionId, workflow }
            })
          const waiting = yield* suspend(false)
          expect((yield* store.read(waiting.workflow, waiting.executionId))?.status).toBe("pending")
          // Its next run's message is there to claim.
          yield* claimRun(waiting.workflow, waiting.executionId)
          const failed = yield* suspend(true)
          expect((yield* store.read(failed.workflow, failed.executionId))?.status).toBe("suspended")
          yield* store.wake(failed.workflow, failed.executionId, "explicit")
          expect((yield* store.read(failed.workflow, failed.executionId))?.status).toBe("pending")
        }))
    })
  })
}

describe("the PostgreSQL driver's shared statements", () => {
  it.layer(drivers[0]!.layer, { timeout: "60 seconds" })((it) => {
    it.effect("a call whose data PostgreSQL refuses fails alone: the calls batched with it are answered", () =>
      Effect.gen(function*() {
        const store = yield* WorkflowStore.WorkflowStore
        const { executionId, workflow } = fresh()
        yield* start(workflow, executionId)
        // A NUL character: JSON carries it, jsonb refuses it.
        const [bad, good] = yield* Effect.all([
          Effect.flip(store.recordStep(workflow, executionId, "activity", "bad", 1, { text: "a\u0000b" })),
          store.recordStep(workflow, executionId, "activity", "good", 1, { ok: true })
        ], { concurrency: "unbounded" })
        expect(bad._tag).toBe("DatabaseError")
        expect(good).toEqual({ inserted: true, result: { ok: true } })
        expect(yield* store.step(workflow, executionId, "activity", "bad", 1)).toBeUndefined()
      }))
  })
})
