/**
 * The PostgreSQL driver's calls that the runs of a claimed batch make at once — read an
 * execution, begin a run, record an activity — each one statement for every call of its kind in
 * the same tick (`batching.ts`). Their answers are the single statement's: a run's journal as it
 * stands when it begins, the record that stands (first write wins).
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import { classifySqlErrors } from "@effect-durable/pg/ErrorClassification"
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import { batched } from "./batching.js"
import type { ExecutionRow, Recorded, StepKind, StepRow } from "./storeContract.js"
import { journalKey, runId } from "./storeContract.js"

interface Execution {
  readonly workflow: string
  readonly executionId: string
}
interface Step extends Execution {
  readonly kind: StepKind
  readonly name: string
  readonly attempt: number
  readonly result: unknown
}
type Begun = { readonly row: ExecutionRow; readonly wakeSeq: string; readonly steps: ReadonlyArray<StepRow> }

const executionKey = ({ executionId, workflow }: Execution) => runId(workflow, executionId)
const stepKey = (step: Omit<Step, "result">) =>
  `${runId(step.workflow, step.executionId)}\u0000${journalKey(step.kind, step.name, step.attempt)}`
const byKey = <R, A>(rows: ReadonlyArray<R>, key: (row: R) => string, value: (row: R) => A) =>
  new Map(rows.map((row) => [key(row), value(row)]))

export const make = (
  sql: SqlClient.SqlClient,
  executions: Statement.Fragment,
  steps: Statement.Fragment,
  inTransaction: Effect.Effect<boolean>
) => {
  /** The executions of `inputs`, as a relation `u(w, i)`. */
  const unnested = (inputs: ReadonlyArray<Execution>) =>
    sql`unnest(${inputs.map((e) => e.workflow)}::text[], ${inputs.map((e) => e.executionId)}::text[]) AS u(w, i)`
  const rowColumns = sql`e.workflow, e.execution_id, e.status, e.result, e.payload, e.interrupt_requested,
    e.interrupt_unsafe, e.parent_workflow, e.parent_execution_id, CASE WHEN e.pinned THEN e.deploy_version END AS pinned_to,
    (extract(epoch FROM e.created_at) * 1000000)::bigint::text AS incarnation`
  type Row = ExecutionRow & { readonly workflow: string; readonly execution_id: string }
  const rowOf = ({ execution_id: _, workflow: __, ...row }: Row): ExecutionRow => row
  const keyOfRow = (row: Row) => executionKey({ workflow: row.workflow, executionId: row.execution_id })

  const read = batched<Execution, ExecutionRow | undefined>({
    key: executionKey,
    missing: undefined,
    inTransaction,
    one: ({ executionId, workflow }) =>
      sql<
        Row
      >`SELECT ${rowColumns} FROM ${executions} e WHERE e.workflow = ${workflow} AND e.execution_id = ${executionId}`
        .pipe(
          Effect.map((rows) => rows[0] === undefined ? undefined : rowOf(rows[0])),
          classifySqlErrors("WorkflowEngine.poll")
        ),
    many: (inputs) =>
      sql<Row>`SELECT ${rowColumns} FROM ${executions} e JOIN ${unnested(inputs)}
                 ON e.workflow = u.w AND e.execution_id = u.i`.pipe(
        Effect.map((rows) => byKey(rows, keyOfRow, rowOf)),
        classifySqlErrors("WorkflowEngine.poll")
      )
  })

  /** A run begun: its row, wake sequence and journal, returned by the update. */
  type BegunRow = Row & { wake_seq: string; steps: ReadonlyArray<StepRow> }
  const begin = sql`UPDATE ${executions} e SET status = 'running', runs = e.runs + 1, resume_requested = false,
                                               updated_at = now()`
  const begun = sql`RETURNING ${rowColumns}, e.wake_seq::text AS wake_seq,
    (SELECT coalesce(json_agg(json_build_object('kind', s.kind, 'name', s.name, 'attempt', s.attempt,
                                                  'result', s.result,
                                                  'recorded', (extract(epoch FROM s.recorded_at) * 1000000)::bigint)),
                     '[]'::json)
       FROM ${steps} s WHERE s.workflow = e.workflow AND s.execution_id = e.execution_id) AS steps`
  const begunOf = ({ steps, wake_seq, ...row }: BegunRow): Begun => ({ row: rowOf(row), wakeSeq: wake_seq, steps })
  const beginRun = batched<Execution, Begun | undefined>({
    key: executionKey,
    missing: undefined,
    inTransaction,
    one: ({ executionId, workflow }) =>
      sql<BegunRow>`${begin}
         WHERE e.workflow = ${workflow} AND e.execution_id = ${executionId} AND e.status <> 'complete'
        ${begun}`.pipe(
        Effect.map((rows) => rows[0] === undefined ? undefined : begunOf(rows[0])),
        classifySqlErrors("WorkflowEngine.run")
      ),
    many: (inputs) =>
      sql<BegunRow>`${begin} FROM ${unnested(inputs)}
         -- coalesce: a status the planner cannot estimate (nearly every row is complete, so it
         -- would scan the table for the few that are not), leaving the key's index to drive.
         WHERE e.workflow = u.w AND e.execution_id = u.i AND coalesce(e.status, '') <> 'complete'
        ${begun}`.pipe(
        Effect.map((rows) => byKey(rows, keyOfRow, begunOf)),
        classifySqlErrors("WorkflowEngine.run")
      )
  })

  /**
   * Records that stand after the insert: this statement's, or one that stood before it began.
   * `result: undefined` with `inserted: false`: a racing writer's record, committed while the
   * statement waited on it, that the statement's snapshot does not hold (read it after).
   */
  const record = batched<Step, { readonly inserted: boolean; readonly result: unknown }>({
    key: stepKey,
    missing: { inserted: false, result: undefined },
    inTransaction,
    one: ({ attempt, executionId, kind, name, result, workflow }) =>
      sql<{ inserted: boolean; result: unknown }>`
        WITH inserted AS (
          INSERT INTO ${steps} (workflow, execution_id, kind, name, attempt, result)
          VALUES (${workflow}, ${executionId}, ${kind}, ${name}, ${attempt}, ${JSON.stringify(result ?? null)}::jsonb)
          ON CONFLICT DO NOTHING
          RETURNING result)
        SELECT EXISTS (SELECT 1 FROM inserted) AS inserted,
               coalesce((SELECT result FROM inserted),
                        (SELECT result FROM ${steps} WHERE workflow = ${workflow} AND execution_id = ${executionId}
                            AND kind = ${kind} AND name = ${name} AND attempt = ${attempt})) AS result`.pipe(
        Effect.map(([row]) => ({
          inserted: row!.inserted,
          result: row!.inserted || row!.result !== null ? row!.result : undefined
        })),
        classifySqlErrors("WorkflowEngine.recordStep")
      ),
    many: (inputs) =>
      sql<
        {
          workflow: string
          execution_id: string
          kind: StepKind
          name: string
          attempt: number
          inserted: boolean
          result: unknown
        }
      >`
        WITH u AS (
          SELECT * FROM unnest(${inputs.map((s) => s.workflow)}::text[], ${inputs.map((s) => s.executionId)}::text[],
                               ${inputs.map((s) => s.kind)}::text[], ${inputs.map((s) => s.name)}::text[],
                               ${inputs.map((s) => s.attempt)}::int[], ${
        inputs.map((s) => JSON.stringify(s.result ?? null))
      }::text[]) WITH ORDINALITY AS u(w, i, k, n, a, r, o)),
        inserted AS (
          INSERT INTO ${steps} (workflow, execution_id, kind, name, attempt, result)
          SELECT w, i, k, n, a, r::jsonb FROM u ORDER BY o
          ON CONFLICT DO NOTHING
          RETURNING workflow, execution_id, kind, name, attempt, result)
        SELECT u.w AS workflow, u.i AS execution_id, u.k AS kind, u.n AS name, u.a AS attempt,
               ins.workflow IS NOT NULL AS inserted, coalesce(ins.result, s.result) AS result
          FROM u
          LEFT JOIN inserted ins
                 ON (ins.workflow, ins.execution_id, ins.kind, ins.name, ins.attempt) = (u.w, u.i, u.k, u.n, u.a)
          LEFT JOIN ${steps} s
                 ON (s.workflow, s.execution_id, s.kind, s.name, s.attempt) = (u.w, u.i, u.k, u.n, u.a)`.pipe(
        Effect.map((rows) =>
          byKey(
            rows,
            (row) =>
              stepKey({
                workflow: row.workflow,
                executionId: row.execution_id,
                kind: row.kind,
                name: row.name,
                attempt: row.attempt
              }),
            (row) => ({ inserted: row.inserted, result: row.inserted || row.result !== null ? row.result : undefined })
          )
        ),
        classifySqlErrors("WorkflowEngine.recordStep")
      )
  })

  return {
    read: (workflow: string, executionId: string): Effect.Effect<ExecutionRow | undefined, DatabaseError> =>
      read({ workflow, executionId }),
    beginRun: (workflow: string, executionId: string): Effect.Effect<Begun | undefined, DatabaseError> =>
      beginRun({ workflow, executionId }),
    record: (
      step: Step
    ): Effect.Effect<Recorded | { readonly inserted: false; readonly result: undefined }, DatabaseError> => record(step)
  }
}
