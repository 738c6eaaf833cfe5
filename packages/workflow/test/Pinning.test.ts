// Pinned runs in a rolling deploy, with real processes of two versions against one database: a
// run started under version 1 is claimed only by processes of version 1 — with none left it waits,
// shown stranded, while version 2's processes run their own — and it ends on version 1's code once
// a process of that version is back. (The two versions disagree: either running the other's run
// would have diverged.) An operator moves a run between versions: to one whose code disagrees, it
// diverges, shown; back to its own and resumed, it ends there.
import { eventually } from "@effect-durable/testing/Eventually"
import * as Fixture from "@effect-durable/testing/Fixture"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as WorkflowDeploys from "@effect-durable/workflow/WorkflowDeploys"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import { fileURLToPath } from "node:url"
import { Go, Job, JobLayer } from "./fixtures/pinnedWorkflow.js"

const runner = fileURLToPath(new URL("./fixtures/versioned-runner.ts", import.meta.url))
const substrate = TestSubstrate.layer({ database: { maxConnections: 16, applicationName: "workflow-pinning-test" } })

/** This process as a deploy of `version` that starts runs and runs none (the runner processes do). */
const starter = (version: "v1" | "v2") =>
  JobLayer(version).pipe(
    Layer.provideMerge(PgWorkflowEngine.layer({ version, pinned: true, runs: false, pollInterval: "100 millis" }))
  )

describe("pinned runs across a rolling deploy, in processes of two versions", () => {
  it.layer(substrate, { timeout: "3 minutes", excludeTestServices: true })((it) => {
    it.effect("a run ends on the version it started under: none left, it waits (stranded) while the new version runs its own; a process of its version back, it ends there", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const db = yield* TestDatabase.TestDatabase
        yield* sql`CREATE TABLE pinned_effects (id text NOT NULL, step text NOT NULL, version text NOT NULL)`
        const context = yield* Effect.context<never>()
        const underVersion = <A, E, R>(version: "v1" | "v2", effect: Effect.Effect<A, E, R>) =>
          effect.pipe(Effect.provide(starter(version).pipe(Layer.provideMerge(Layer.succeedContext(context)))))
        const effects = (id: string) =>
          Effect.map(
            sql<
              { step: string; version: string }
            >`SELECT step, version FROM pinned_effects WHERE id = ${id} ORDER BY ctid`,
            (rows) => rows.map((row) => `${row.step} by ${row.version}`)
          )
        const spawn = (version: "v1" | "v2") =>
          Fixture.spawn(runner, { PINNED_TEST_DATABASE_URL: Redacted.value(db.url), RUNNER_VERSION: version })
        const go = (executionId: string) =>
          DurableDeferred.done(Go, {
            token: DurableDeferred.tokenFromExecutionId(Go, { workflow: Job, executionId }),
            exit: Effect.void as never
          })
        const suspended = (executionId: string) =>
          eventually(Job.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Suspended", 60)
        const complete = (executionId: string) =>
          eventually(Job.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Complete", 60)

        // Version 1 runs: "old" prepares and waits for Go.
        const v1 = spawn("v1")
        const old = yield* underVersion(
          "v1",
          Effect.tap(Job.execute({ id: "old" }, { discard: true }), suspended)
        ).pipe(Effect.tapError(() => Effect.sync(() => console.error(v1.stderr()))))
        expect(yield* effects("old")).toEqual(["prepare by v1"])

        // The rolling deploy: a version 2 process comes up, the version 1 one goes.
        const v2 = spawn("v2")
        v1.child.kill("SIGTERM")
        yield* Effect.promise(() => v1.exited)
        // "old" goes on (its Go arrives) with no process of its version; "new" starts under version 2.
        yield* underVersion("v1", go(old))
        yield* underVersion(
          "v2",
          Effect.gen(function*() {
            const id = yield* Job.execute({ id: "new" }, { discard: true })
            yield* suspended(id)
            yield* go(id)
            yield* complete(id)
            return id
          })
        ).pipe(Effect.tapError(() => Effect.sync(() => console.error(v2.stderr()))))
        expect(yield* effects("new")).toEqual(["prepareAll by v2", "finishAll by v2"])
        // Version 2 claimed and ran "new", whose wake came after old's: old was never its to claim.
        const [row] = yield* sql<{ status: string; runs: number }>`
          SELECT status, runs FROM durable.workflow_executions WHERE execution_id = ${old}`
        expect(row).toEqual({ status: "pending", runs: 1 })
        expect(yield* effects("old")).toEqual(["prepare by v1"])
        const deploys = yield* WorkflowDeploys.make
        expect(yield* deploys.stranded({ workflow: Job._tag, after: "0 seconds", limit: 10 })).toEqual([
          expect.objectContaining({ executionId: old, version: "v1" })
        ])

        // An operator moves it to version 2, whose code disagrees with its journal: it diverges there,
        // shown, having run nothing of version 2's.
        expect(yield* deploys.repin(Job._tag, old, "v2")).toBe(true)
        yield* eventually(
          deploys.versions({ workflow: Job._tag }),
          (counts) => counts.some((c) => c.version === "v2" && c.diverged === 1),
          60
        )
        expect(yield* effects("old")).toEqual(["prepare by v1"])
        // Pinned back to version 1 and resumed: with a process of version 1 back (a rollback, or one
        // kept for the old runs), it ends there.
        expect(yield* deploys.repin(Job._tag, old, "v1")).toBe(true)
        expect(yield* Effect.flatMap(WorkflowAdmin.make, (admin) => admin.resume(Job._tag, old))).toBe(true)
        const back = spawn("v1")
        yield* underVersion("v1", complete(old)).pipe(
          Effect.tapError(() => Effect.sync(() => console.error(back.stderr())))
        )
        expect(yield* effects("old")).toEqual(["prepare by v1", "finish by v1"])
        expect(yield* deploys.stranded({ workflow: Job._tag, after: "0 seconds", limit: 10 })).toEqual([])
        for (const process of [v2, back]) process.child.kill("SIGTERM")
        yield* Effect.promise(() => Promise.all([v2.exited, back.exited]))
      }))
    it.effect("a child of a pinned run is pinned to its parent's version, even when an unpinned process of that version runs the parent", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const context = yield* Effect.context<never>()
        const Child = Workflow.make("Pinned/Child", { payload: { id: Schema.String }, idempotencyKey: ({ id }) => id })
        const Parent = Workflow.make("Pinned/Parent", {
          payload: { id: Schema.String },
          idempotencyKey: ({ id }) => id
        })
        const code = Layer.mergeAll(
          Child.toLayer(() => Effect.void),
          Parent.toLayer(({ id }) => Child.execute({ id: `${id}-child` }))
        )
        const engine = (options: PgWorkflowEngine.PgWorkflowEngineOptions) =>
          code.pipe(
            Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "100 millis", ...options })),
            Layer.provideMerge(Layer.succeedContext(context))
          )
        // Started by a pinned process of v3 that runs nothing; run by an unpinned process of v3.
        const parent = yield* Parent.execute({ id: "p" }, { discard: true }).pipe(
          Effect.provide(engine({ version: "v3", pinned: true, runs: false }))
        )
        yield* eventually(Parent.poll(parent), (r) => Option.isSome(r) && r.value._tag === "Complete", 60).pipe(
          Effect.provide(engine({ version: "v3" }))
        )
        const rows = yield* sql<{ workflow: string; deploy_version: string; pinned: boolean }>`
          SELECT workflow, deploy_version, pinned FROM durable.workflow_executions
           WHERE workflow IN ('Pinned/Parent', 'Pinned/Child') ORDER BY workflow`
        expect(rows).toEqual([
          { workflow: "Pinned/Child", deploy_version: "v3", pinned: true },
          { workflow: "Pinned/Parent", deploy_version: "v3", pinned: true }
        ])
      }))
  })
})
