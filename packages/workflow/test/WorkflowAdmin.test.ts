import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as Activity from "effect/workflow/Activity"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import * as PgWorkflowEngine from "../src/PgWorkflowEngine.js"
import * as WorkflowAdmin from "../src/WorkflowAdmin.js"

const Approval = Workflow.make("Admin/Approval", {
  payload: { id: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ id }) => id
})
const Approved = DurableDeferred.make("Admin/Approved", { success: Schema.String })
const ApprovalLayer = Approval.toLayer(({ id }) =>
  Effect.gen(function*() {
    yield* Activity.make({ name: "notify", execute: Effect.void })
    const by = yield* DurableDeferred.await(Approved)
    return `${id} approved by ${by}`
  })
)
const layer = ApprovalLayer.pipe(
  Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "200 millis" })),
  Layer.provideMerge(TestSubstrate.layer({ database: { applicationName: "workflow-admin-test" } }))
)

describe("WorkflowAdmin", () => {
  it.layer(layer, { excludeTestServices: true })((it) => {
    it.effect("the statuses the code knows are exactly those the table's check constraint allows, in its order", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const [row] = yield* sql<{ definition: string }>`
          SELECT pg_get_constraintdef(oid) AS definition FROM pg_constraint
           WHERE conname = 'workflow_executions_status_check' AND connamespace = 'durable'::regnamespace`
        expect([...row!.definition.matchAll(/'([a-z]+)'::text/g)].map((m) => m[1])).toEqual([...WorkflowAdmin.Statuses])
      }))

    it.effect("lists and shows executions with their journal; interrupt and resume act on them by name", () =>
      Effect.gen(function*() {
        const admin = yield* WorkflowAdmin.make
        const a = yield* Approval.execute({ id: "a" }, { discard: true })
        const b = yield* Approval.execute({ id: "b" }, { discard: true })
        yield* eventually(
          admin.list({ workflow: Approval._tag, status: "suspended", limit: 10 }),
          (l) => l.length === 2
        )
        const shown = yield* admin.show(Approval._tag, a)
        expect(shown).toMatchObject({
          workflow: Approval._tag,
          executionId: a,
          status: "suspended",
          payload: { id: "a" }
        })
        expect(shown?.steps.map((step) => `${step.kind}:${step.name}`)).toEqual(["activity:notify"])
        expect(yield* admin.show(Approval._tag, "nobody")).toBeUndefined()

        // Resume wakes a suspended execution (it replays and suspends again: still no approval).
        expect(yield* admin.resume(Approval._tag, a)).toBe(true)
        yield* eventually(admin.show(Approval._tag, a), (e) => e?.status === "suspended" && e.runs === 2)

        expect(yield* admin.interrupt(Approval._tag, b)).toBe(true)
        const result = yield* eventually(
          Approval.poll(b),
          (r) => Option.isSome(r) && r.value._tag === "Complete"
        )
        expect(Option.isSome(result) && result.value._tag === "Complete" && Exit.hasInterrupts(result.value.exit))
          .toBe(true)
        // Acting on a complete execution changes nothing, and says so.
        expect(yield* admin.interrupt(Approval._tag, b)).toBe(false)
        expect(yield* admin.resume(Approval._tag, b)).toBe(false)
        expect((yield* admin.list({ status: "complete", limit: 10 })).map((e) => e.executionId)).toEqual([b])
      }))

    it.effect("purge deletes executions complete past the retention with their journal; a child of an unfinished parent stays", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const admin = yield* WorkflowAdmin.make
        const old = yield* Approval.execute({ id: "old" }, { discard: true })
        const recent = yield* Approval.execute({ id: "recent" }, { discard: true })
        for (const id of [old, recent]) {
          yield* eventually(admin.show(Approval._tag, id), (e) => e?.status === "suspended")
          yield* admin.interrupt(Approval._tag, id)
          yield* eventually(admin.show(Approval._tag, id), (e) => e?.status === "complete")
        }
        // A complete child whose parent is still running: its parent's replay reads its result.
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status)
                   VALUES ('Admin/Parent', 'p-1', '{}', 'f', 'running')`
        yield* sql`INSERT INTO durable.workflow_executions
                     (workflow, execution_id, payload, payload_fingerprint, status, completed_at, parent_workflow, parent_execution_id)
                   VALUES ('Admin/Child', 'c-1', '{}', 'f', 'complete', now(), 'Admin/Parent', 'p-1')`
        yield* sql`UPDATE durable.workflow_executions SET completed_at = now() - interval '2 hours'
                    WHERE execution_id IN (${old}, 'c-1')`
        expect(yield* admin.purgeable("1 hour")).toBe(1)
        expect(yield* admin.purge({ olderThan: "1 hour", batchSize: 1 })).toBe(1)
        expect(yield* admin.show(Approval._tag, old)).toBeUndefined()
        const [left] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM durable.workflow_steps WHERE execution_id = ${old}`
        expect(left!.n).toBe(0)
        expect((yield* admin.show(Approval._tag, recent))?.status).toBe("complete")
        expect((yield* admin.show("Admin/Child", "c-1"))?.status).toBe("complete")
        const refused = yield* Effect.all([
          Effect.flip(admin.purge({ olderThan: "1 minute" })),
          Effect.flip(admin.purge({ olderThan: Number.NaN })),
          Effect.flip(admin.purgeable(-5))
        ])
        expect(refused.map((e) => [e._tag, (e as { argument?: string }).argument])).toEqual([
          ["InvalidInput", "olderThan"],
          ["InvalidInput", "olderThan"],
          ["InvalidInput", "olderThan"]
        ])
        expect(yield* admin.purgeable("1 hour")).toBe(0)
      }))

    it.effect("bad input is a typed InvalidInput naming the argument, before any SQL", () =>
      Effect.gen(function*() {
        const admin = yield* WorkflowAdmin.make
        const failures = yield* Effect.all([
          Effect.flip(admin.list({ limit: 0 })),
          Effect.flip(admin.list({ limit: 10, status: "stuck" as WorkflowAdmin.Status })),
          Effect.flip(admin.show("", "x")),
          Effect.flip(admin.interrupt("w", "nul\u0000id")),
          Effect.flip(admin.resume("w".repeat(300), "x"))
        ])
        expect(failures.map((f) => [f._tag, (f as { argument?: string }).argument])).toEqual([
          ["InvalidInput", "limit"],
          ["InvalidInput", "status"],
          ["InvalidInput", "workflow"],
          ["InvalidInput", "executionId"],
          ["InvalidInput", "workflow"]
        ])
      }))
  })
})
