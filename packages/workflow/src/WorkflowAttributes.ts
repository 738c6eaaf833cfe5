/**
 * Searchable attributes of workflow executions: a few named strings an operator finds a run by
 * ("subscription 48's run"), the way Temporal's search attributes and DBOS's workflow attributes
 * work. Given at start (`atStart`, around the `execute` that starts it) or set from the workflow
 * (`set`, merged: a replay sets the same values again, harmlessly), stored on the execution's row
 * (`workflow_executions.attributes`, a GIN index), filtered by `WorkflowAdmin.list`, the CLI's
 * `workflows list --attribute key=value` and the page. They are shown wherever executions are,
 * also where payloads are hidden: keep secrets out of them.
 *
 * @since 0.5.0
 */
import { InvalidInput } from "@effect-durable/core/Errors"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import { classifySqlErrors } from "@effect-durable/pg/ErrorClassification"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"
import { WorkflowInstance } from "effect/workflow/WorkflowEngine"

/** Attribute names to values. */
export type Attributes = Readonly<Record<string, string>>

/** At most this many attributes on one execution. */
export const MAX_ATTRIBUTES = 16
/** The longest value, in characters. */
export const MAX_VALUE_LENGTH = 256

const NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/
/** Half a UTF-16 pair: not text, and PostgreSQL's jsonb refuses it. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/**
 * The attributes as stored, or the rule one breaks: a name of 1-64 characters (a letter, then
 * letters, digits, `_`, `.`, `-`), a value of 1-256 characters without control characters, at
 * most 16 of them.
 */
export const validate = (attributes: unknown, argument = "attributes"): Effect.Effect<Attributes, InvalidInput> => {
  const fail = (rule: string, at = argument) => Effect.fail(new InvalidInput({ argument: at, rule }))
  if (typeof attributes !== "object" || attributes === null || Array.isArray(attributes)) {
    return fail("an object of attribute names to string values")
  }
  const entries = Object.entries(attributes)
  if (entries.length > MAX_ATTRIBUTES) return fail(`at most ${MAX_ATTRIBUTES} attributes`)
  for (const [name, value] of entries) {
    if (!NAME.test(name)) {
      return fail("a name of 1-64 characters: a letter, then letters, digits, _ . -", `${argument}.${name}`)
    }
    if (
      typeof value !== "string" || value.length === 0 || value.length > MAX_VALUE_LENGTH ||
      // deno-lint-ignore no-control-regex
      /[\u0000-\u001f\u007f]/.test(value) || LONE_SURROGATE.test(value)
    ) {
      return fail(`a string of 1-${MAX_VALUE_LENGTH} characters without control characters`, `${argument}.${name}`)
    }
  }
  return Effect.succeed(Object.fromEntries(entries) as Attributes)
}

/** A filter as an operator types it, `name=value` (the value may hold `=`); undefined when it is not one. */
export const parseFilter = (text: string): Attributes | undefined => {
  const at = text.indexOf("=")
  return at < 1 ? undefined : { [text.slice(0, at)]: text.slice(at + 1) }
}

/** The attributes the next start in this context records (`atStart`). */
export const StartAttributes = Context.Reference<Attributes>("@effect-durable/workflow/StartAttributes", {
  defaultValue: () => ({})
})

/**
 * `Workflow.execute(payload).pipe(WorkflowAttributes.atStart({ subscription: "48" }))`: the
 * execution it starts carries these attributes from its first row. A start of an execution that
 * exists already changes nothing (as its payload: the first start stands). A bad attribute fails
 * the start with `InvalidInput` naming it, before anything is written.
 */
export const atStart = (attributes: Attributes) =>
<A, E, R>(
  start: Effect.Effect<A, E, R>
): Effect.Effect<A, E | InvalidInput, R> =>
  Effect.flatMap(validate(attributes), (checked) => Effect.provideService(start, StartAttributes, checked))

/**
 * From inside a workflow: merges `attributes` into the execution's (a name set again takes the
 * new value). Idempotent, so it runs on every replay without an activity; an `InvalidInput`
 * names a bad one. A database failure is retried briefly in place; one that lasts is a defect
 * of the run. Its write is not fenced by the run's lease: a stale run may set a value again.
 */
export const set = (
  attributes: Attributes
): Effect.Effect<void, InvalidInput, WorkflowInstance | SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const checked = yield* validate(attributes)
    const instance = yield* WorkflowInstance
    const sql = yield* SqlClient.SqlClient
    const executions = sql.literal((yield* DurableSettings).table("workflow_executions"))
    const merged = sql`attributes || ${JSON.stringify(checked)}::jsonb`
    const [row] = yield* sql<{ n: number }>`
      UPDATE ${executions} SET attributes = ${merged}
       WHERE workflow = ${instance.workflow._tag} AND execution_id = ${instance.executionId}
         AND (SELECT count(*) FROM jsonb_object_keys(${merged})) <= ${MAX_ATTRIBUTES}
      RETURNING 1 AS n`.pipe(
      classifySqlErrors("WorkflowAttributes.set"),
      // A passing failure (a restart, a dropped connection) is retried in place; one that lasts
      // is a defect of the run (the execution's result, unless the workflow captures none).
      Effect.retry({ schedule: Schedule.exponential("100 millis"), times: 6, while: (error) => error.retryable }),
      Effect.orDie
    )
    if (row === undefined) {
      const [exists] = yield* sql<{ n: number }>`
        SELECT 1 AS n FROM ${executions}
         WHERE workflow = ${instance.workflow._tag} AND execution_id = ${instance.executionId}`.pipe(Effect.orDie)
      return yield* exists === undefined
        ? Effect.die(
          `WorkflowAttributes.set: no execution ${instance.executionId} of ${instance.workflow._tag} (it runs on PgWorkflowEngine only)`
        )
        : Effect.fail(new InvalidInput({ argument: "attributes", rule: `at most ${MAX_ATTRIBUTES} attributes` }))
    }
  })
