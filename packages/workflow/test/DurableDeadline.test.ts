// `DurableDeadline.awaitWithin` on the engine, against a real PostgreSQL, on the live clock:
// a deadline is a database clock, so time here is the database's.
import { InvalidInput } from "@effect-durable/core/Errors"
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import * as FastCheck from "fast-check"
import * as DurableDeadline from "../src/DurableDeadline.js"
import * as PgWorkflowEngine from "../src/PgWorkflowEngine.js"

const substrate = TestSubstrate.layer({ database: { maxConnections: 16, applicationName: "deadline-test" } })
const engine = PgWorkflowEngine.layer({ pollInterval: "200 millis" }).pipe(Layer.provideMerge(substrate))

const Declined = Schema.Struct({ reason: Schema.String })
const Approved = DurableDeferred.make("Deadline/Approved", { success: Schema.String, error: Declined })

const Approval = Workflow.make("Deadline/Approval", {
  payload: { id: Schema.String, within: Schema.String },
  success: Schema.String,
  error: Schema.Union([Declined, DurableDeadline.DeadlinePassed, InvalidInput]),
  idempotencyKey: ({ id }) => id
})

const ApprovalLayer = Approval.toLayer(({ within }) =>
  Effect.map(
    DurableDeadline.awaitWithin(Approved, { within: within as `${number} millis` }),
    (by) => `approved by ${by}`
  )
)

/** Polls until the execution is complete; its result. */
const completed = (executionId: string) =>
  eventually(Approval.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Complete").pipe(
    Effect.map((result) => Option.getOrThrow(result))
  )

const suspended = (executionId: string) =>
  eventually(Approval.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Suspended")

/** The execution's clock messages still open (not delivered, not dropped). */
const openClocks = (executionId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.outbox
                        WHERE topic = ${"workflow.clock:" + Approval._tag} AND payload->>'executionId' = ${executionId}`
      .pipe(Effect.map((rows) => rows[0]!.n), Effect.orDie))

const token = (executionId: string) =>
  DurableDeferred.tokenFromExecutionId(Approved, { workflow: Approval, executionId })

describe("DurableDeadline.awaitWithin", () => {
  it.layer(ApprovalLayer.pipe(Layer.provideMerge(engine)), { excludeTestServices: true, timeout: "2 minutes" })(
    (it) => {
      it.effect("the deferred completed before the deadline: its value, and the deadline's clock is dropped", () =>
        Effect.gen(function*() {
          const executionId = yield* Approval.execute({ id: "first", within: "3600000 millis" }, { discard: true })
          yield* suspended(executionId)
          // Suspended on both: the deferred and the deadline's clock (due in an hour).
          expect(yield* openClocks(executionId)).toBe(1)
          yield* DurableDeferred.succeed(Approved, { token: token(executionId), value: "ann" })
          expect(yield* completed(executionId)).toEqual(
            new Workflow.Complete({ exit: Exit.succeed("approved by ann") })
          )
          expect(yield* openClocks(executionId)).toBe(0)
        }))

      it.effect("the deadline passed first: DeadlinePassed, and a completion after it changes nothing", () =>
        Effect.gen(function*() {
          const executionId = yield* Approval.execute({ id: "late", within: "300 millis" }, { discard: true })
          const result = yield* completed(executionId)
          expect(result).toEqual(
            new Workflow.Complete({
              exit: Exit.fail(new DurableDeadline.DeadlinePassed({ deferred: "Deadline/Approved", within: "300ms" }))
            })
          )
          yield* DurableDeferred.succeed(Approved, { token: token(executionId), value: "bob" })
          // Executing again answers from the recorded result: the late completion is not seen.
          const again = yield* Effect.flip(Approval.execute({ id: "late", within: "300 millis" }))
          expect(again).toEqual(new DurableDeadline.DeadlinePassed({ deferred: "Deadline/Approved", within: "300ms" }))
        }))

      it.effect("a deferred that fails before the deadline fails the wait with its own error", () =>
        Effect.gen(function*() {
          const executionId = yield* Approval.execute({ id: "declined", within: "3600000 millis" }, { discard: true })
          yield* suspended(executionId)
          yield* DurableDeferred.fail(Approved, { token: token(executionId), error: { reason: "over budget" } })
          expect(yield* completed(executionId)).toEqual(
            new Workflow.Complete({ exit: Exit.fail({ reason: "over budget" }) })
          )
        }))

      it.effect("a deadline that is not a finite duration above zero is an InvalidInput naming it", () =>
        Effect.gen(function*() {
          const error = yield* Effect.flip(Approval.execute({ id: "zero", within: "0 millis" }))
          expect(error).toEqual(new InvalidInput({ argument: "within", rule: "a finite duration greater than zero" }))
        }))
    }
  )

  it.effect("any deadline that is not a finite duration above zero is refused before anything is recorded", () =>
    Effect.promise(() =>
      FastCheck.assert(
        FastCheck.asyncProperty(
          FastCheck.oneof(
            FastCheck.double({ max: 0 }),
            FastCheck.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY)
          ),
          async (millis) => {
            // No engine in context: a refusal never reaches it.
            const error = await Effect.runPromise(
              Effect.flip(
                DurableDeadline.awaitWithin(Approved, { within: millis }) as Effect.Effect<unknown, unknown>
              )
            )
            expect(error).toEqual(new InvalidInput({ argument: "within", rule: "a finite duration greater than zero" }))
          }
        ),
        { numRuns: 200 }
      )
    ))
})
