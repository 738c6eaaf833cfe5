// Searchable attributes: given at start or set from the workflow, stored on the execution,
// filtered by WorkflowAdmin.list; a bad one is an InvalidInput naming it, nothing written.
import { InvalidInput } from "@effect-durable/core/Errors"
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import * as FastCheck from "fast-check"
import * as PgWorkflowEngine from "../src/PgWorkflowEngine.js"
import * as WorkflowAdmin from "../src/WorkflowAdmin.js"
import * as WorkflowAttributes from "../src/WorkflowAttributes.js"

const Paid = DurableDeferred.make("Attributes/Paid", { success: Schema.String })

const Renewal = Workflow.make("Attributes/Renewal", {
  payload: { subscription: Schema.String, stage: Schema.String },
  success: Schema.String,
  error: InvalidInput,
  idempotencyKey: ({ subscription }) => subscription
})
const RenewalLayer = Renewal.toLayer(({ stage }) =>
  Effect.gen(function*() {
    // From the workflow: set on every replay, harmlessly (a merge).
    yield* WorkflowAttributes.set({ stage })
    return yield* DurableDeferred.await(Paid)
  })
)

const layer = RenewalLayer.pipe(
  Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "200 millis" })),
  Layer.provideMerge(TestSubstrate.layer({ database: { applicationName: "workflow-attributes-test" } }))
)

describe("WorkflowAttributes", () => {
  it.layer(layer, { excludeTestServices: true, timeout: "2 minutes" })((it) => {
    it.effect("given at start and set from the workflow: an execution is found by them, and only it", () =>
      Effect.gen(function*() {
        const admin = yield* WorkflowAdmin.make
        const ids = yield* Effect.forEach(
          ["48", "49"],
          (subscription) =>
            Renewal.execute({ subscription, stage: "charging" }, { discard: true }).pipe(
              WorkflowAttributes.atStart({ subscription, tenant: "acme" })
            )
        )
        const found = yield* eventually(
          admin.list({ workflow: Renewal._tag, attributes: { subscription: "48", stage: "charging" }, limit: 10 }),
          (l) => l.length === 1
        )
        expect(found.map((e) => e.executionId)).toEqual([ids[0]])
        expect(found[0]!.attributes).toEqual({ subscription: "48", tenant: "acme", stage: "charging" })
        expect(
          (yield* admin.list({ attributes: { tenant: "acme" }, limit: 10 })).map((e) => e.executionId).sort()
        ).toEqual([...ids].sort())
        expect(yield* admin.list({ attributes: { tenant: "globex" }, limit: 10 })).toEqual([])
        expect((yield* admin.show(Renewal._tag, ids[1]!))?.attributes).toMatchObject({ subscription: "49" })
      }))

    it.effect("a second start of an execution keeps the attributes of the first", () =>
      Effect.gen(function*() {
        const admin = yield* WorkflowAdmin.make
        const id = yield* Renewal.execute({ subscription: "50", stage: "a" }, { discard: true }).pipe(
          WorkflowAttributes.atStart({ subscription: "50" })
        )
        yield* Renewal.execute({ subscription: "50", stage: "a" }, { discard: true }).pipe(
          WorkflowAttributes.atStart({ subscription: "other" })
        )
        const shown = yield* eventually(admin.show(Renewal._tag, id), (e) => e?.attributes.stage === "a")
        expect(shown?.attributes).toEqual({ subscription: "50", stage: "a" })
      }))

    it.effect("a bad attribute at start is an InvalidInput naming it, and nothing is written", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const error = yield* Effect.flip(
          Renewal.execute({ subscription: "51", stage: "a" }, { discard: true }).pipe(
            WorkflowAttributes.atStart({ "1st": "x" })
          )
        )
        expect(error).toEqual(
          new InvalidInput({
            argument: "attributes.1st",
            rule: "a name of 1-64 characters: a letter, then letters, digits, _ . -"
          })
        )
        const rows = yield* sql`SELECT 1 FROM durable.workflow_executions WHERE payload->>'subscription' = '51'`
        expect(rows).toEqual([])
        const admin = yield* WorkflowAdmin.make
        expect(yield* Effect.flip(admin.list({ attributes: { ok: "" }, limit: 1 }))).toMatchObject({
          argument: "attributes.ok"
        })
      }))

    it.effect("a bad attribute set from the workflow fails it with the InvalidInput, typed", () =>
      Effect.gen(function*() {
        const id = yield* Renewal.execute({ subscription: "52", stage: "bad\u0007stage" }, { discard: true })
        const result = yield* eventually(Renewal.poll(id), (r) => r._tag === "Some" && r.value._tag === "Complete")
        expect(result._tag === "Some" && result.value._tag === "Complete" && result.value.exit._tag).toBe("Failure")
        expect(String(result._tag === "Some" && result.value._tag === "Complete" && result.value.exit)).toContain(
          "attributes.stage"
        )
      }))
  })

  it.effect("validate takes exactly the attributes the rules allow (any input)", () =>
    Effect.promise(() =>
      FastCheck.assert(
        FastCheck.asyncProperty(
          FastCheck.dictionary(
            FastCheck.string({ maxLength: 70 }),
            FastCheck.oneof(FastCheck.string({ maxLength: 300 }), FastCheck.string({ unit: "binary", maxLength: 20 })),
            { maxKeys: 20 }
          ),
          async (attributes) => {
            const valid = Object.keys(attributes).length <= WorkflowAttributes.MAX_ATTRIBUTES &&
              Object.entries(attributes).every(([name, value]) =>
                /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/.test(name) && value.length >= 1 && value.length <= 256 &&
                !/[\u0000-\u001f\u007f]/.test(value) &&
                !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(value)
              )
            const exit = await Effect.runPromiseExit(WorkflowAttributes.validate(attributes))
            expect(exit._tag === "Success").toBe(valid)
          }
        ),
        { numRuns: 300 }
      )
    ))
})
