// A net under the workflow package's operator and token surfaces (issue 42): any argument to
// WorkflowAdmin and DeferredTokens gives a success or a typed failure, never a defect or a
// generic database error; inside a caller's transaction a failure leaves it usable.
// EFFECT_DURABLE_PROPERTY_RUNS raises the count (CI runs more).
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import * as FastCheck from "fast-check"
import * as DeferredTokens from "../src/DeferredTokens.js"
import * as WorkflowAdmin from "../src/WorkflowAdmin.js"

const RUNS = Number(process.env.EFFECT_DURABLE_PROPERTY_RUNS ?? "60")

const cyclic: Record<string, unknown> = {}
cyclic.self = cyclic
const text = FastCheck.oneof(
  FastCheck.string(),
  FastCheck.string({ unit: "binary", maxLength: 20 }),
  FastCheck.constantFrom("", "\u0000", "\ud800", "x".repeat(300), "x".repeat(100_000), "Order", "exec-7")
)
const anything = FastCheck.oneof(
  text,
  FastCheck.double(),
  FastCheck.jsonValue({ maxDepth: 2 }),
  FastCheck.constantFrom<unknown>(
    null,
    undefined,
    {},
    [],
    true,
    cyclic,
    -1,
    Number.NaN,
    1e300,
    10n,
    "1 hour",
    "-5 hours"
  )
)

const keys = [{ id: "k1", secret: Redacted.make("a-deferred-token-secret-of-32-bytes") }] as const

type Operation = {
  readonly name: string
  readonly run: (admin: WorkflowAdmin.WorkflowAdmin) => Effect.Effect<unknown, unknown>
}

const operations = FastCheck.oneof<Array<FastCheck.Arbitrary<Operation>>>(
  FastCheck.tuple(anything, anything, anything).map(([workflow, status, limit]) => ({
    name: "list",
    run: (a) => a.list({ workflow, status, limit } as never)
  })),
  FastCheck.tuple(anything, anything, FastCheck.constantFrom("show" as const, "interrupt" as const, "resume" as const))
    .map(([workflow, executionId, action]) => ({
      name: action,
      run: (a) => a[action](workflow as never, executionId as never)
    })),
  FastCheck.tuple(anything, anything).map(([olderThan, batchSize]) => ({
    name: "purge",
    run: (a) => Effect.andThen(a.purgeable(olderThan as never), a.purge({ olderThan, batchSize } as never))
  })),
  FastCheck.tuple(anything, anything).map(([token, expiresIn]) => ({
    name: "sign, open",
    run: () =>
      Effect.gen(function*() {
        const tokens = yield* DeferredTokens.make(keys)
        const signed = yield* tokens.sign(token as never, { expiresIn } as never)
        yield* tokens.open(signed)
      })
  })),
  anything.map((signed) => ({
    name: "open",
    run: () => Effect.flatMap(DeferredTokens.make(keys), (tokens) => tokens.open(signed as never))
  })),
  anything.map((keyring) => ({ name: "keyring", run: () => DeferredTokens.make(keyring as never) }))
)

const TYPED = new Set(["InvalidInput", "InvalidDeferredToken", "DurableConfigError"])

describe("WorkflowAdmin and DeferredTokens, any argument", () => {
  it.layer(TestSubstrate.layer(), { timeout: "5 minutes" })((it) => {
    it.effect("succeed or fail typed, never a defect; inside a caller's transaction a failure leaves it usable", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const admin = yield* WorkflowAdmin.make
        const check = (ops: ReadonlyArray<Operation>, inTransaction: boolean) =>
          Effect.runPromise(
            Effect.gen(function*() {
              const body = Effect.gen(function*() {
                for (const op of ops) {
                  const exit = yield* Effect.exit(op.run(admin))
                  if (Exit.isFailure(exit)) {
                    expect(Cause.hasDies(exit.cause), `${op.name} died: ${Cause.pretty(exit.cause)}`).toBe(false)
                    const failure = Cause.findErrorOption(exit.cause)
                    const tag = failure._tag === "Some" ? (failure.value as { _tag?: string })._tag : undefined
                    expect(TYPED.has(tag ?? ""), `${op.name} failed with ${tag}: ${Cause.pretty(exit.cause)}`).toBe(
                      true
                    )
                    expect(yield* sql`SELECT 1 AS one`).toEqual([{ one: 1 }])
                  }
                }
              })
              yield* inTransaction
                ? Effect.flip(sql.withTransaction(Effect.andThen(body, Effect.fail("rollback" as const))))
                : body
            })
          )
        yield* Effect.promise(() =>
          FastCheck.assert(
            FastCheck.asyncProperty(
              FastCheck.array(operations, { minLength: 1, maxLength: 4 }),
              FastCheck.boolean(),
              check
            ),
            { numRuns: RUNS }
          )
        )
      }))
  })
})
