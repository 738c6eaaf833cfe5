/**
 * Limits on a workflow's runs (`WorkflowLimits`): held by the claim of its run topic, per group
 * read from the payload at the start and carried by every run message of the execution.
 */
import { InvalidInput } from "@effect-durable/core/Errors"
import * as FlowControl from "@effect-durable/pg/FlowControl"
import { eventually } from "@effect-durable/testing/Eventually"
import * as FlowChecker from "@effect-durable/testing/FlowChecker"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Latch from "effect/Latch"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as Activity from "effect/workflow/Activity"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import * as FastCheck from "fast-check"
import * as PgWorkflowEngine from "../src/PgWorkflowEngine.js"
import * as WorkflowAdmin from "../src/WorkflowAdmin.js"
import * as WorkflowLimits from "../src/WorkflowLimits.js"

// What the charge activities do at once, per tenant, and the most ever at once.
const active = new Map<string, number>()
const most = new Map<string, number>()
let gate = Latch.makeUnsafe(false)

const Charge = WorkflowLimits.groupBy(
  Workflow.make("Limits/Charge", {
    payload: { tenant: Schema.String, invoice: Schema.String },
    success: Schema.String,
    idempotencyKey: ({ invoice }) => invoice
  }),
  ({ tenant }) => tenant
)
const ChargeLayer = Charge.toLayer(({ invoice, tenant }) =>
  Activity.make({
    name: "charge",
    success: Schema.String,
    execute: Effect.gen(function*() {
      const now = (active.get(tenant) ?? 0) + 1
      active.set(tenant, now)
      most.set(tenant, Math.max(most.get(tenant) ?? 0, now))
      yield* Effect.suspend(() => gate.await)
      active.set(tenant, active.get(tenant)! - 1)
      return `charged ${invoice}`
    })
  })
)

const Confirmed = DurableDeferred.make("Limits/Confirmed", { success: Schema.String })
const Signup = WorkflowLimits.groupBy(
  Workflow.make("Limits/Signup", {
    payload: { tenant: Schema.String, user: Schema.String },
    success: Schema.String,
    idempotencyKey: ({ user }) => user
  }),
  ({ tenant }) => tenant
)
const SignupLayer = Signup.toLayer(() => DurableDeferred.await(Confirmed))

const BadGroup = WorkflowLimits.groupBy(
  Workflow.make("Limits/BadGroup", { payload: { group: Schema.String }, idempotencyKey: ({ group }) => group }),
  ({ group }) => group
)
const BadGroupLayer = BadGroup.toLayer(() => Effect.void)

const layer = Layer.mergeAll(ChargeLayer, SignupLayer, BadGroupLayer).pipe(
  Layer.provideMerge(PgWorkflowEngine.layer({ pollInterval: "100 millis" })),
  Layer.provideMerge(TestSubstrate.layer({ database: { applicationName: "workflow-limits-test" } }))
)

const completed = (ids: ReadonlyArray<string>) =>
  Effect.map(
    Effect.forEach(ids, (id) => Charge.poll(id)),
    (polls) => polls.filter((p) => p._tag === "Some" && p.value._tag === "Complete").length
  )

describe("WorkflowLimits", () => {
  it.layer(layer, { excludeTestServices: true, timeout: "2 minutes" })((it) => {
    it.effect("a group's runs never pass its limit across the engine, another group is not held back, the queued ones say they wait on the limit", () =>
      Effect.gen(function*() {
        yield* FlowChecker.install()
        // One run of a group at a time. (Each blocked run holds one of the engine's three claim
        // loops until it settles: two blocked leave one loop claiming, to show the rest held back.)
        yield* WorkflowLimits.set(Charge, { groupMaxInFlight: 1, by: "test" })
        gate = yield* Latch.make(false)
        const starts = [
          ...Array.from({ length: 4 }, (_, i) => ({ tenant: "acme", invoice: `acme-${i}` })),
          ...Array.from({ length: 2 }, (_, i) => ({ tenant: "globex", invoice: `globex-${i}` }))
        ]
        const ids = yield* Effect.forEach(starts, (payload) => Charge.execute(payload, { discard: true }))
        // Both groups at their limit at once (globex is not behind acme's queue); the others queue.
        yield* eventually(
          Effect.sync(() => [active.get("acme"), active.get("globex")]),
          ([acme, globex]) => acme === 1 && globex === 1
        )
        const admin = yield* WorkflowAdmin.make
        const queued = yield* eventually(
          admin.list({ workflow: Charge._tag, status: "pending", limit: 10 }),
          (list) => list.length === 4
        )
        for (const execution of queued) {
          expect(execution.waitingOn).toEqual([{ kind: "limit", group: execution.group }])
        }
        expect(queued.map((execution) => execution.group).sort()).toEqual(["acme", "acme", "acme", "globex"])
        expect(WorkflowAdmin.describeWait(queued[0]!.waitingOn![0]!)).toMatch(
          /^the workflow's limit \(group (acme|globex)\)$/
        )
        expect((yield* admin.waiting({ workflow: Charge._tag })).map(({ executions, kind, name }) => ({
          kind,
          name,
          executions
        }))).toEqual([
          { kind: "limit", name: "acme", executions: 3 },
          { kind: "limit", name: "globex", executions: 1 }
        ])
        yield* Latch.open(gate)
        yield* eventually(completed(ids), (n) => n === ids.length)
        expect([most.get("acme"), most.get("globex")]).toEqual([1, 1])
        // Counted inside every claim of the run topic, not only by what the activities saw.
        expect((yield* FlowChecker.overshoots()).filter((o) => o.topic === WorkflowLimits.topic(Charge))).toEqual([])
        expect(yield* admin.list({ workflow: Charge._tag, status: "pending", limit: 10 })).toEqual([])
      }))

    it.effect("every run message of an execution carries its group: the first, and a wake's", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const id = yield* Signup.execute({ tenant: "initech", user: "milton" }, { discard: true })
        const admin = yield* WorkflowAdmin.make
        yield* eventually(admin.show(Signup._tag, id), (e) => e?.status === "suspended")
        const token = DurableDeferred.tokenFromExecutionId(Confirmed, { workflow: Signup, executionId: id })
        yield* DurableDeferred.succeed(Confirmed, { token, value: "yes" })
        yield* eventually(Signup.poll(id), (p) => p._tag === "Some" && p.value._tag === "Complete")
        const runs = yield* sql<{ group_key: string | null }>`
          SELECT group_key FROM (SELECT topic, ordering_key, group_key FROM durable.outbox
                                 UNION ALL SELECT topic, ordering_key, group_key FROM durable.outbox_history) m
           WHERE topic = ${WorkflowLimits.topic(Signup)} AND ordering_key = ${`${Signup._tag}/${id}`}`
        expect(runs.length).toBeGreaterThanOrEqual(2)
        expect(runs.map((run) => run.group_key)).toEqual(Array(runs.length).fill("initech"))
        expect((yield* admin.show(Signup._tag, id))?.group).toBe("initech")
      }))

    it.effect("a bad group is a defect naming the rule, and nothing is written", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const exit = yield* Effect.exit(BadGroup.execute({ group: "" }, { discard: true }))
        expect(Exit.isFailure(exit) && Cause.squash(exit.cause)).toEqual(
          new InvalidInput({
            argument: "group",
            rule: "a non-empty string of at most 128 bytes without NUL or a lone surrogate"
          })
        )
        expect(yield* sql`SELECT 1 FROM durable.workflow_executions WHERE workflow = ${BadGroup._tag}`).toEqual([])
        expect(yield* sql`SELECT 1 FROM durable.outbox WHERE topic = ${WorkflowLimits.topic(BadGroup)}`).toEqual([])
        // Checked ahead, typed.
        expect(yield* Effect.flip(WorkflowLimits.groupOf(BadGroup, { group: "x".repeat(129) }))).toMatchObject({
          argument: "group"
        })
      }))

    it.effect("set, setGroup and clear are FlowControl's limits of the workflow's run topic", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        yield* WorkflowLimits.set(Signup, { maxInFlight: 10, groupMaxInFlight: 3, by: "test" })
        yield* WorkflowLimits.setGroup(Signup, "initech", { maxInFlight: 5, weight: 2, by: "test" })
        const limit = (yield* flow.limits).find((l) => l.topic === "workflow.run:Limits/Signup")
        expect(limit).toMatchObject({ maxInFlight: 10, groupMaxInFlight: 3 })
        expect(limit?.groups).toMatchObject([{ group: "initech", maxInFlight: 5, weight: 2 }])
        expect(yield* WorkflowLimits.clear(Signup)).toBe(true)
        expect((yield* flow.limits).find((l) => l.topic === "workflow.run:Limits/Signup")).toBeUndefined()
        expect(yield* Effect.flip(WorkflowLimits.set(Signup, { maxInFlight: 0 }))).toBeInstanceOf(InvalidInput)
      }))
  })

  it.effect("groupOf takes exactly the groups of 1-128 bytes without NUL or a lone surrogate (any string)", () =>
    Effect.sync(() =>
      FastCheck.assert(
        // Any text, with NULs and lone surrogates mixed in.
        FastCheck.property(
          FastCheck.string({
            unit: FastCheck.oneof(
              FastCheck.string({ unit: "binary", minLength: 1, maxLength: 1 }),
              FastCheck.constantFrom("\u0000", "\uD800", "\uDFFF", "\uDBFF")
            ),
            maxLength: 140
          }),
          (group) => {
            const result = Effect.runSync(Effect.result(WorkflowLimits.groupOf(BadGroup, { group })))
            const bytes = Buffer.byteLength(group, "utf8")
            const good = bytes >= 1 && bytes <= 128 && !group.includes("\u0000") && !/\p{Cs}/u.test(group)
            expect(result._tag === "Success" ? result.success : undefined).toBe(good ? group : undefined)
          }
        )
      )
    ))
})
