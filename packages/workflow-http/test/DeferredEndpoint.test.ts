// The deferred endpoint over real HTTP, a real engine and a real PostgreSQL: a signed token
// completes the deferred an execution waits on, once; every refusal writes nothing.
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as DeferredCompleter from "@effect-durable/workflow/DeferredCompleter"
import * as DeferredTokens from "@effect-durable/workflow/DeferredTokens"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { describe, expect, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import * as Http from "node:http"
import * as DeferredEndpoint from "../src/DeferredEndpoint.js"

const Rejected = Schema.Struct({ reason: Schema.String })
const Approval = DurableDeferred.make("Endpoint/Approval", {
  success: Schema.Struct({ by: Schema.String, limit: Schema.Int }),
  error: Rejected
})
/** Not served by the endpoint. */
const Other = DurableDeferred.make("Endpoint/Other")

const Purchase = Workflow.make("Endpoint/Purchase", {
  payload: { id: Schema.String },
  success: Schema.String,
  error: Rejected,
  idempotencyKey: ({ id }) => id
})
let bodies = 0
const PurchaseLayer = Purchase.toLayer(() =>
  Effect.gen(function*() {
    bodies++
    const approval = yield* DurableDeferred.await(Approval)
    return `approved by ${approval.by} up to ${approval.limit}`
  })
)

const keys = [{ id: "k1", secret: Redacted.make("a-deferred-token-secret-of-32-bytes") }] as const

const App = HttpRouter.serve(DeferredEndpoint.layer({ deferreds: [Approval], maxBodyBytes: 4096, maxDepth: 8 }), {
  disableLogger: true,
  disableListenLog: true
}).pipe(
  Layer.provideMerge(NodeHttpServer.layer(Http.createServer, { port: 0, host: "127.0.0.1" })),
  Layer.provideMerge(PurchaseLayer),
  Layer.provideMerge(DeferredTokens.layer(keys)),
  Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "200 millis" })),
  Layer.provideMerge(TestSubstrate.layer({ database: { maxConnections: 24, applicationName: "deferred-endpoint" } }))
)

interface Reply {
  readonly status: number
  readonly body: any
}

const post = (body: string) =>
  Effect.gen(function*() {
    const server = yield* HttpServer.HttpServer
    const port = "port" in server.address ? server.address.port : 0
    return yield* Effect.promise(async (): Promise<Reply> => {
      const response = await fetch(`http://127.0.0.1:${port}/workflow/deferred`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body
      })
      const text = await response.text()
      return { status: response.status, body: text === "" ? undefined : JSON.parse(text) }
    })
  })

/** Starts an execution and waits until it is suspended on its approval; its signed token. */
const started = (id: string, deferred: DurableDeferred.DurableDeferred<any, any> = Approval) =>
  Effect.gen(function*() {
    const executionId = yield* Purchase.execute({ id }, { discard: true })
    yield* eventually(statusOf(executionId), (status) => status === "suspended")
    const tokens = yield* DeferredTokens.DeferredTokens
    const token = DurableDeferred.tokenFromExecutionId(deferred, { workflow: Purchase, executionId })
    return { executionId, signed: yield* tokens.sign(token) }
  })

const statusOf = (executionId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ status: string }>`SELECT status FROM durable.workflow_executions
                             WHERE workflow = ${Purchase._tag} AND execution_id = ${executionId}`.pipe(
      Effect.map((rows) => rows[0]?.status),
      Effect.orDie
    ))

/** The journal's deferred rows and the inbox's receipts for an execution. */
const written = (executionId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all({
      deferreds: sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.workflow_steps
                                     WHERE execution_id = ${executionId} AND kind = 'deferred'`,
      receipts: sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.inbox
                                    WHERE consumer = ${DeferredCompleter.CONSUMER}`
    }).pipe(
      Effect.map(({ deferreds, receipts }) => ({ deferreds: deferreds[0]!.n, receipts: receipts[0]!.n })),
      Effect.orDie
    ))

const completed = (executionId: string) =>
  Effect.map(
    eventually(Purchase.poll(executionId), (result) => Option.isSome(result) && result.value._tag === "Complete"),
    (result) => Option.getOrThrow(result) as Workflow.Complete<string, { reason: string }>
  )

describe("DeferredEndpoint", () => {
  layer(App, { timeout: "2 minutes", excludeTestServices: true })((it) => {
    it.effect("completes the deferred once: the workflow finishes with the value; a repeat is answered the same", () =>
      Effect.gen(function*() {
        const { executionId, signed } = yield* started("p-1")
        const receiptsBefore = (yield* written(executionId)).receipts
        const body = JSON.stringify({ token: signed, value: { by: "ada", limit: 500 } })
        const first = yield* post(body)
        expect(first).toEqual({
          status: 200,
          body: { outcome: "completed", workflow: Purchase._tag, executionId, deferred: Approval.name }
        })
        const result = yield* completed(executionId)
        expect(result.exit).toEqual(Exit.succeed("approved by ada up to 500"))
        const again = yield* post(body)
        expect([again.status, again.body.outcome]).toEqual([200, "already-completed"])
        expect(yield* written(executionId)).toEqual({ deferreds: 1, receipts: receiptsBefore + 1 })
      }))

    it.effect("an error completes it as a failure, which the workflow fails with", () =>
      Effect.gen(function*() {
        const { executionId, signed } = yield* started("p-2")
        const reply = yield* post(JSON.stringify({ token: signed, error: { reason: "over budget" } }))
        expect([reply.status, reply.body.outcome]).toEqual([200, "completed"])
        expect((yield* completed(executionId)).exit).toEqual(Exit.fail({ reason: "over budget" }))
      }))

    it.effect("refusals write nothing: another value, a bad token, a value of the wrong shape, a bad body", () =>
      Effect.gen(function*() {
        const { executionId, signed } = yield* started("p-3")
        const cases: Array<[string, number, string]> = [
          [
            JSON.stringify({ token: `${signed.slice(0, -2)}AA`, value: { by: "x", limit: 1 } }),
            403,
            "deferred-token-invalid"
          ],
          [JSON.stringify({ token: "not-a-token", value: { by: "x", limit: 1 } }), 403, "deferred-token-invalid"],
          [JSON.stringify({ token: signed, value: { by: "x", limit: 1.5 } }), 400, "deferred-value-invalid"],
          [JSON.stringify({ token: signed, value: { by: "x" } }), 400, "deferred-value-invalid"],
          [JSON.stringify({ token: signed, error: { reason: 7 } }), 400, "deferred-value-invalid"],
          [
            JSON.stringify({ token: signed, value: { by: "x", limit: 1 }, error: { reason: "r" } }),
            400,
            "deferred-request-invalid"
          ],
          [JSON.stringify({ value: 1 }), 400, "deferred-request-invalid"],
          [JSON.stringify([signed]), 400, "deferred-request-invalid"],
          ["{\"token\": ", 400, "request-body-not-json"],
          [JSON.stringify({ token: signed, value: { by: "x".repeat(5000), limit: 1 } }), 413, "request-body-too-large"],
          [JSON.stringify({ token: signed, value: [[[[[[[[[[1]]]]]]]]]] }), 400, "request-body-too-deep"]
        ]
        for (const [body, status, code] of cases) {
          const reply = yield* post(body)
          expect([reply.status, reply.body?.code]).toEqual([status, code])
          expect(JSON.stringify(reply.body)).not.toContain(signed)
        }
        expect((yield* written(executionId)).deferreds).toBe(0)
        expect(yield* statusOf(executionId)).toBe("suspended")

        // Another value after a first one stands: 409, the first stands.
        expect((yield* post(JSON.stringify({ token: signed, value: { by: "ada", limit: 1 } }))).status).toBe(200)
        const conflict = yield* post(JSON.stringify({ token: signed, value: { by: "eve", limit: 9 } }))
        expect([conflict.status, conflict.body.code]).toEqual([409, "deferred-already-completed"])
        expect((yield* completed(executionId)).exit).toEqual(Exit.succeed("approved by ada up to 1"))

        // The execution complete: a new value finds nothing waiting.
        const other = yield* started("p-4")
        expect((yield* post(JSON.stringify({ token: other.signed, value: { by: "a", limit: 2 } }))).status).toBe(200)
        yield* completed(other.executionId)
        const tokens = yield* DeferredTokens.DeferredTokens
        const late = yield* tokens.sign(
          DurableDeferred.tokenFromExecutionId(DurableDeferred.make("Endpoint/Approval/1"), {
            workflow: Purchase,
            executionId: other.executionId
          })
        )
        const complete = yield* post(JSON.stringify({ token: late, value: { by: "a", limit: 2 } }))
        expect([complete.status, complete.body.code]).toEqual([409, "workflow-execution-complete"])
      }))

    it.effect("an unknown execution is 404, a deferred the endpoint does not serve is 404", () =>
      Effect.gen(function*() {
        const tokens = yield* DeferredTokens.DeferredTokens
        const nowhere = yield* tokens.sign(
          DurableDeferred.tokenFromExecutionId(Approval, { workflow: Purchase, executionId: "never-started" })
        )
        const missing = yield* post(JSON.stringify({ token: nowhere, value: { by: "a", limit: 1 } }))
        expect([missing.status, missing.body.code]).toEqual([404, "workflow-execution-not-found"])
        const { executionId, signed } = yield* started("p-5", Other)
        const unknown = yield* post(JSON.stringify({ token: signed }))
        expect([unknown.status, unknown.body.code]).toEqual([404, "deferred-unknown"])
        expect((yield* written(executionId)).deferreds).toBe(0)
        expect(yield* written("never-started")).toMatchObject({ deferreds: 0 })
      }))

    it.effect("16 callbacks at once: the same value completes it once; different values, one wins and 15 are refused", () =>
      Effect.gen(function*() {
        const same = yield* started("p-6")
        const receiptsBefore = (yield* written(same.executionId)).receipts
        const body = JSON.stringify({ token: same.signed, value: { by: "ada", limit: 3 } })
        const replies = yield* Effect.all(Array.from({ length: 16 }, () => post(body)), { concurrency: "unbounded" })
        const outcomes = replies.map((reply) => `${reply.status} ${reply.body.outcome}`).sort()
        expect(outcomes.filter((outcome) => outcome === "200 completed")).toHaveLength(1)
        expect(outcomes.filter((outcome) => outcome === "200 already-completed")).toHaveLength(15)
        expect(yield* written(same.executionId)).toEqual({ deferreds: 1, receipts: receiptsBefore + 1 })

        const racing = yield* started("p-7")
        const differing = yield* Effect.all(
          Array.from(
            { length: 16 },
            (_, i) => post(JSON.stringify({ token: racing.signed, value: { by: `user-${i}`, limit: i } }))
          ),
          { concurrency: "unbounded" }
        )
        const winners = differing.filter((reply) => reply.status === 200)
        expect(winners).toHaveLength(1)
        expect(differing.filter((reply) => reply.status === 409)).toHaveLength(15)
        const result = yield* completed(racing.executionId)
        expect(Exit.isSuccess(result.exit) && /^approved by user-(\d+) up to \1$/.test(result.exit.value)).toBe(true)
        expect((yield* written(racing.executionId)).deferreds).toBe(1)
        expect(bodies).toBeGreaterThanOrEqual(2)
      }))
  })
})

describe("DeferredEndpoint after a purge", () => {
  layer(App, { timeout: "2 minutes", excludeTestServices: true })((it) => {
    it.effect("D12: a callback for a purged execution is 404; the same callback for the execution started again completes the new run", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const admin = yield* WorkflowAdmin.make
        const { executionId, signed } = yield* started("p-d12")
        const body = JSON.stringify({ token: signed, value: { by: "ada", limit: 1 } })
        expect((yield* post(body)).body.outcome).toBe("completed")
        yield* completed(executionId)
        // Completed two hours ago, as far as the purge's floor can tell.
        yield* sql`UPDATE durable.workflow_executions SET completed_at = now() - interval '2 hours'
                    WHERE execution_id = ${executionId}`
        expect(yield* admin.purge({ olderThan: "1 hour" })).toBeGreaterThanOrEqual(1)
        const afterPurge = yield* post(body)
        expect([afterPurge.status, afterPurge.body.code]).toEqual([404, "workflow-execution-not-found"])
        // Started again under the same id: the same callback completes it, once.
        const again = yield* started("p-d12")
        expect(again.executionId).toBe(executionId)
        const second = yield* post(body)
        expect([second.status, second.body.outcome]).toEqual([200, "completed"])
        expect((yield* completed(executionId)).exit).toEqual(Exit.succeed("approved by ada up to 1"))
        expect((yield* post(body)).body.outcome).toBe("already-completed")
      }))

    it.effect("a purge racing callbacks, show and resume of the executions it deletes: every answer 200 or 404, no step outlives its execution", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const admin = yield* WorkflowAdmin.make
        const runs = yield* Effect.forEach(
          Array.from({ length: 6 }, (_, i) => `p-race-${i}`),
          (id) =>
            Effect.gen(function*() {
              const run = yield* started(id)
              const body = JSON.stringify({ token: run.signed, value: { by: "ada", limit: 2 } })
              expect((yield* post(body)).status).toBe(200)
              yield* completed(run.executionId)
              return { ...run, body }
            }),
          { concurrency: 3 }
        )
        yield* sql`UPDATE durable.workflow_executions SET completed_at = now() - interval '2 hours'
                    WHERE execution_id IN ${sql.in(runs.map((run) => run.executionId))}`
        const readers = Effect.forEach(runs, (run) =>
          Effect.all([
            post(run.body),
            admin.show(Purchase._tag, run.executionId),
            admin.resume(Purchase._tag, run.executionId)
          ]), { concurrency: "unbounded" })
        const [purged, answers] = yield* Effect.all([admin.purge({ olderThan: "1 hour", batchSize: 2 }), readers], {
          concurrency: "unbounded"
        })
        expect(purged).toBeGreaterThanOrEqual(runs.length)
        for (const [reply, shown, resumed] of answers) {
          expect([200, 404]).toContain(reply.status)
          if (reply.status === 200) expect(reply.body.outcome).toBe("already-completed")
          expect(shown === undefined || shown.status === "complete").toBe(true)
          expect(resumed).toBe(false)
        }
        const [orphans] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM durable.workflow_steps s
           WHERE NOT EXISTS (SELECT 1 FROM durable.workflow_executions e
                              WHERE e.workflow = s.workflow AND e.execution_id = s.execution_id)`
        expect(orphans!.n).toBe(0)
        for (const run of runs) expect((yield* post(run.body)).status).toBe(404)
      }))
  })
})
