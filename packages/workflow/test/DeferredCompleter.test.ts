// DeferredCompleter: a deferred completed by its signed token, without HTTP, in the caller's
// transaction or its own. Every refusal is a typed error and writes nothing; the HTTP route
// over it (`@effect-durable/workflow-http`) has its own suite.
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, layer } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import * as FastCheck from "fast-check"
import * as DeferredCompleter from "../src/DeferredCompleter.js"
import * as DeferredTokens from "../src/DeferredTokens.js"
import * as PgWorkflowEngine from "../src/PgWorkflowEngine.js"
import * as WorkflowAdmin from "../src/WorkflowAdmin.js"

const Rejected = Schema.Struct({ reason: Schema.String })
const Approval = DurableDeferred.make("Completer/Approval", {
  success: Schema.Struct({ by: Schema.String, limit: Schema.Int }),
  error: Rejected
})
/** Not listed in the completer. */
const Other = DurableDeferred.make("Completer/Other")

const Purchase = Workflow.make("Completer/Purchase", {
  payload: { id: Schema.String },
  success: Schema.String,
  error: Rejected,
  idempotencyKey: ({ id }) => id
})
const PurchaseLayer = Purchase.toLayer(() =>
  Effect.map(DurableDeferred.await(Approval), (approval) => `approved by ${approval.by} up to ${approval.limit}`)
)

const App = DeferredCompleter.layer([Approval]).pipe(
  Layer.provideMerge(PurchaseLayer),
  Layer.provideMerge(
    DeferredTokens.layer([{ id: "k1", secret: Redacted.make("a-deferred-token-secret-of-32-bytes") }])
  ),
  Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "200 millis" })),
  Layer.provideMerge(TestSubstrate.layer({ database: { applicationName: "deferred-completer" } }))
)

/** The execution as the operator's view shows it (its status and journal). */
const shown = (executionId: string) =>
  Effect.flatMap(WorkflowAdmin.make, (admin) => Effect.orDie(admin.show(Purchase._tag, executionId)))

/** Starts an execution, waits until it is suspended on its approval; the signed token of `deferred`. */
const started = (id: string, deferred: DurableDeferred.DurableDeferred<any, any> = Approval) =>
  Effect.gen(function*() {
    const executionId = yield* Purchase.execute({ id }, { discard: true })
    yield* eventually(shown(executionId), (execution) => execution?.status === "suspended")
    const token = DurableDeferred.tokenFromExecutionId(deferred, { workflow: Purchase, executionId })
    return { executionId, signed: yield* (yield* DeferredTokens.DeferredTokens).sign(token) }
  })

/** The execution's journaled deferreds. */
const written = (executionId: string) =>
  Effect.map(shown(executionId), (execution) => ({
    deferreds: execution?.steps.filter((step) => step.kind === "deferred").length
  }))

const outcome = (executionId: string) =>
  Effect.map(
    eventually(Purchase.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Complete"),
    (r) => (Option.getOrThrow(r) as Workflow.Complete<string, { reason: string }>).exit
  )

describe("DeferredCompleter", () => {
  layer(App, { timeout: "2 minutes", excludeTestServices: true })((it) => {
    it.effect("inside the caller's transaction: rolled back with it, committed with it; a refusal leaves it usable", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { complete } = yield* DeferredCompleter.DeferredCompleter
        const { executionId, signed } = yield* started("p-1")
        const rolledBack = yield* sql.withTransaction(
          Effect.flatMap(
            complete({ token: signed, value: { by: "ada", limit: 8 } }),
            (done) => Effect.fail({ _tag: "Abort" as const, done })
          )
        ).pipe(Effect.flip)
        expect(rolledBack._tag === "Abort" && rolledBack.done.outcome).toBe("completed")
        expect((yield* written(executionId)).deferreds).toBe(0)
        const inside = yield* sql.withTransaction(Effect.gen(function*() {
          const refused = yield* Effect.flip(complete({ token: signed, value: { by: 1 } }))
          const done = yield* complete({ token: signed, value: { by: "ada", limit: 8 } })
          return [refused._tag, done.outcome]
        }))
        expect(inside).toEqual(["InvalidDeferredValue", "completed"])
        expect(yield* outcome(executionId)).toEqual(Exit.succeed("approved by ada up to 8"))
        // The same exit again is recognized; its error side completes another run as a failure.
        expect((yield* complete({ token: signed, value: { by: "ada", limit: 8 } })).outcome).toBe("already-completed")
        const declined = yield* started("p-2")
        expect((yield* complete({ token: declined.signed, error: { reason: "no" } })).outcome).toBe("completed")
        expect(yield* outcome(declined.executionId)).toEqual(Exit.fail({ reason: "no" }))
      }))

    it.effect("each refusal is its own typed error and writes nothing", () =>
      Effect.gen(function*() {
        const { complete } = yield* DeferredCompleter.DeferredCompleter
        const tokens = yield* DeferredTokens.DeferredTokens
        const { executionId, signed } = yield* started("p-3")
        const other = yield* started("p-4", Other)
        const unknown = yield* tokens.sign(
          DurableDeferred.tokenFromExecutionId(Approval, { workflow: Purchase, executionId: "never-started" })
        )
        const before = yield* written(executionId)
        const refusals = yield* Effect.forEach([
          complete({ token: `${signed.slice(0, -2)}xx`, value: { by: "eve", limit: 1 } }),
          complete({ token: other.signed }),
          complete({ token: signed, value: { by: "eve" } }),
          complete({ token: signed, error: { reason: 7 } }),
          complete({ token: unknown, value: { by: "eve", limit: 1 } }),
          complete({ token: signed, value: { by: "eve", limit: 1 }, error: { reason: "both" } })
        ], Effect.flip)
        expect(refusals.map((error) => error._tag)).toEqual([
          "InvalidDeferredToken",
          "UnknownDeferred",
          "InvalidDeferredValue",
          "InvalidDeferredValue",
          "ExecutionNotFound",
          "InvalidInput"
        ])
        expect(yield* written(executionId)).toEqual(before)
        // Another value once one stands, and any value once the execution is complete.
        yield* complete({ token: signed, value: { by: "ada", limit: 3 } })
        const conflict = yield* Effect.flip(complete({ token: signed, value: { by: "bob", limit: 3 } }))
        expect(conflict).toMatchObject({ _tag: "DeferredAlreadyCompleted", executionId })
        yield* outcome(executionId)
        // A deferred the complete execution never got: nothing waits for it any more.
        const both = yield* DeferredCompleter.make([Approval, Other])
        // A void deferred takes no value.
        expect((yield* both.complete({ token: other.signed })).outcome).toBe("completed")
        const afterEnd = yield* tokens.sign(
          DurableDeferred.tokenFromExecutionId(Other, { workflow: Purchase, executionId })
        )
        expect(yield* Effect.flip(both.complete({ token: afterEnd }))).toMatchObject({ _tag: "ExecutionComplete" })
        expect((yield* written(executionId)).deferreds).toBe(1)
        const twice = yield* Effect.flip(DeferredCompleter.make([Approval, Approval]))
        expect(twice).toMatchObject({ _tag: "InvalidInput", argument: "deferreds" })
      }))

    it.effect("any completion of a suspended run either completes it or is a typed refusal that writes nothing", () =>
      Effect.gen(function*() {
        const { complete } = yield* DeferredCompleter.DeferredCompleter
        const { executionId, signed } = yield* started("p-5")
        const any = FastCheck.oneof(
          FastCheck.jsonValue({ maxDepth: 3 }),
          FastCheck.record({ by: FastCheck.string({ maxLength: 5 }), limit: FastCheck.integer() }),
          FastCheck.record({ reason: FastCheck.anything({ maxDepth: 1 }) })
        )
        const runs: Array<{ readonly field: "value" | "error"; readonly input: unknown; readonly token: string }> =
          FastCheck.sample(
            FastCheck.record({
              field: FastCheck.constantFrom("value" as const, "error" as const),
              input: any,
              token: FastCheck.oneof(FastCheck.constant(signed), FastCheck.string({ maxLength: 40 }))
            }),
            { numRuns: 60, seed: 7 }
          )
        let completions = 0
        for (const run of runs) {
          const exit = yield* Effect.exit(complete({ token: run.token, [run.field]: run.input }))
          const after = yield* written(executionId)
          if (Exit.isSuccess(exit)) {
            // The first success writes; after it only the same exit is accepted, and writes nothing.
            expect(exit.value.outcome).toBe(completions === 0 ? "completed" : "already-completed")
            completions++
          } else {
            expect(Cause.hasDies(exit.cause) || Cause.hasInterrupts(exit.cause)).toBe(false)
          }
          expect(after.deferreds).toBe(completions === 0 ? 0 : 1)
        }
        expect(completions).toBeGreaterThan(0)
      }))
  })
})
