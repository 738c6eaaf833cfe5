import { eventually } from "@effect-durable/testing/Eventually"
import * as Fixture from "@effect-durable/testing/Fixture"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import * as Workflow from "effect/workflow/Workflow"
import { fileURLToPath } from "node:url"
import * as PgWorkflowEngine from "../src/PgWorkflowEngine.js"
import { Crashy, CrashyLayer, CrashyTx, CrashyTxLayer } from "./fixtures/crashWorkflow.js"

const doomed = fileURLToPath(new URL("./fixtures/doomed-runner.ts", import.meta.url))
const substrate = TestSubstrate.layer({ database: { maxConnections: 12, applicationName: "workflow-crash-test" } })

describe("a workflow runner process killed mid-activity", () => {
  it.layer(substrate, { timeout: "2 minutes", excludeTestServices: true })((it) => {
    it.effect("another process replays the execution: recorded activities do not run again, the interrupted one does, the result is right", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const db = yield* TestDatabase.TestDatabase
        yield* sql`CREATE TABLE IF NOT EXISTS effects (name text NOT NULL)`
        const { child, exited, stderr } = Fixture.spawn(doomed, { CRASH_TEST_DATABASE_URL: Redacted.value(db.url) })

        // Killed for real inside the second activity, after the first one was recorded.
        const started = (name: string) =>
          Effect.map(
            sql<{ n: number }>`SELECT count(*)::int AS n FROM effects WHERE name = ${name}`,
            (rows) => rows[0]!.n
          )
        yield* eventually(started("ship"), (n) => n === 1, 60).pipe(
          Effect.tapError(() => Effect.sync(() => console.error(stderr())))
        )
        child.kill("SIGKILL")
        expect(yield* Effect.promise(() => exited)).toBe("SIGKILL")
        const executionId = yield* Crashy.executionId({ id: "crash-1" })
        const [before] = yield* sql<{ status: string }>`
          SELECT status FROM durable.workflow_executions WHERE execution_id = ${executionId}`
        expect(before?.status).toBe("running")

        // A new runner takes the execution over once the dead one's lease runs out.
        const survivor = CrashyLayer.pipe(
          Layer.provideMerge(PgWorkflowEngine.layer({ lease: "1 second", pollInterval: "100 millis" })),
          Layer.provideMerge(Layer.succeedContext(yield* Effect.context<never>()))
        )
        const result = yield* eventually(
          Crashy.poll(executionId),
          (r) => Option.isSome(r) && r.value._tag === "Complete",
          60
        )
          .pipe(Effect.provide(survivor))
        // charge ran once (recorded before the kill: replayed, not re-run), ship twice (at least once).
        expect(Option.getOrThrow(result)).toEqual(new Workflow.Complete({ exit: Exit.succeed(102) }))
        expect(yield* started("charge")).toBe(1)
        expect(yield* started("ship")).toBe(2)
        const [after] = yield* sql<{ status: string; runs: number }>`
          SELECT status, runs FROM durable.workflow_executions WHERE execution_id = ${executionId}`
        expect(after).toEqual({ status: "complete", runs: 2 })
      }))

    it.effect("killed inside a transactional activity: its writes and journal row roll back together, the next process applies it once", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const db = yield* TestDatabase.TestDatabase
        yield* sql`CREATE TABLE IF NOT EXISTS effects (name text NOT NULL)`
        const { child, exited, stderr } = Fixture.spawn(doomed, {
          CRASH_TEST_DATABASE_URL: Redacted.value(db.url),
          CRASH_TEST_HANG: "1"
        })
        // Its write is invisible until a commit; its advisory lock shows it is inside the activity.
        yield* eventually(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242`.pipe(
            Effect.map((rows) => rows[0]!.n)
          ),
          (n) => n === 1,
          60
        ).pipe(Effect.tapError(() => Effect.sync(() => console.error(stderr()))))
        child.kill("SIGKILL")
        expect(yield* Effect.promise(() => exited)).toBe("SIGKILL")
        const executionId = yield* CrashyTx.executionId({ id: "crash-tx" })
        const survivor = CrashyTxLayer.pipe(
          Layer.provideMerge(PgWorkflowEngine.layer({ lease: "1 second", pollInterval: "100 millis" })),
          Layer.provideMerge(Layer.succeedContext(yield* Effect.context<never>()))
        )
        const result = yield* eventually(
          CrashyTx.poll(executionId),
          (r) => Option.isSome(r) && r.value._tag === "Complete",
          60
        ).pipe(Effect.provide(survivor))
        // The killed run's insert rolled back with its journal row: one write in all, and the
        // activity's result says it was the first.
        expect(Option.getOrThrow(result)).toEqual(new Workflow.Complete({ exit: Exit.succeed(1) }))
        const [effects] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM effects WHERE name = 'invoice'`
        expect(effects?.n).toBe(1)
        const [after] = yield* sql<{ runs: number }>`
          SELECT runs FROM durable.workflow_executions WHERE execution_id = ${executionId}`
        expect(after?.runs).toBe(2)
      }))
  })
})
