/**
 * The PostgreSQL driver's starts outside a caller's transaction, batched: the starts of one
 * workflow asked in the same tick (callers starting many executions at once, a parent starting
 * its children) are one statement — their execution rows and, for each row written, its first
 * run message — and one commit. A start answers when that statement committed, as a start of its
 * own would. Those found started before (or twice in one batch) are compared with the stored
 * payload in one more statement, a mismatch counted on the execution.
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import { classifySqlErrors } from "@effect-durable/pg/ErrorClassification"
import type * as OutboxStatements from "@effect-durable/pg/OutboxStatements"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Request from "effect/Request"
import * as RequestResolver from "effect/RequestResolver"
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import { onlyDatabaseErrors, runMessage } from "./storeContract.js"

/** A start, its payload canonical JSON text with its fingerprint. */
export interface Start
  extends Request.Request<{ readonly started: boolean; readonly mismatch: boolean }, DatabaseError>
{
  readonly _tag: "WorkflowStart"
  readonly workflow: string
  readonly executionId: string
  readonly text: string
  readonly fingerprint: string
  readonly parent: { readonly workflow: string; readonly executionId: string } | undefined
  readonly attributes: string
  readonly group: string | undefined
  readonly version: string | undefined
  readonly pinned: boolean
}
export const Start = Request.tagged<Start>("WorkflowStart")

/** The most starts one statement carries. */
const BATCH = 500

/** Starts, batched by workflow; `executions` is the executions table. */
export const resolver = (
  sql: SqlClient.SqlClient,
  executions: Statement.Fragment,
  statements: OutboxStatements.OutboxStatements["Service"]
) => {
  /**
   * Counts a mismatch on each execution once per start of it with another payload; the stored
   * fingerprints of those that had one.
   */
  const mismatches = (workflow: string, found: ReadonlyArray<Request.Entry<Start>>) =>
    Effect.map(
      sql<{ id: string; fingerprint: string }>`
        WITH u AS (SELECT i, f FROM unnest(${found.map((e) => e.request.executionId)}::text[], ${
        found.map((e) => e.request.fingerprint)
      }::text[]) AS u(i, f)),
             d AS (SELECT u.i, count(*) AS n FROM u JOIN ${executions} x ON x.workflow = ${workflow}
                      AND x.execution_id = u.i AND x.payload_fingerprint <> u.f GROUP BY u.i)
        UPDATE ${executions} e SET payload_mismatches = e.payload_mismatches + d.n
          FROM d WHERE e.workflow = ${workflow} AND e.execution_id = d.i
        RETURNING e.execution_id AS id, e.payload_fingerprint AS fingerprint`.pipe(
        classifySqlErrors("WorkflowEngine.execute")
      ),
      (rows) => new Map(rows.map((row) => [row.id, row.fingerprint]))
    )
  return RequestResolver.batchN(
    RequestResolver.makeGrouped<Start, string>({
      key: (entry) => entry.request.workflow,
      resolver: (entries, workflow) =>
        Effect.gen(function*() {
          // One row per execution id: a second start of it in the batch is a start found standing.
          const firsts = new Map<string, Start>()
          for (const { request } of entries) {
            if (!firsts.has(request.executionId)) firsts.set(request.executionId, request)
          }
          // In id order: two processes starting the same ids lock their rows in one order.
          const batch = [...firsts.values()].sort((a, b) => (a.executionId < b.executionId ? -1 : 1))
          // Absent values as '' (NULLIF): ids, names, groups and versions are never empty.
          const write = sql`
            INSERT INTO ${executions} (workflow, execution_id, payload, payload_fingerprint, parent_workflow,
                                       parent_execution_id, attributes, run_group, deploy_version, pinned)
            SELECT ${workflow}, i, p::jsonb, f, NULLIF(pw, ''), NULLIF(pe, ''), a::jsonb, NULLIF(g, ''), NULLIF(v, ''), n
              FROM unnest(${batch.map((s) => s.executionId)}::text[], ${batch.map((s) => s.text)}::text[],
                          ${batch.map((s) => s.fingerprint)}::text[], ${
            batch.map((s) => s.parent?.workflow ?? "")
          }::text[], ${batch.map((s) => s.parent?.executionId ?? "")}::text[], ${
            batch.map((s) => s.attributes)
          }::text[], ${batch.map((s) => s.group ?? "")}::text[], ${batch.map((s) => s.version ?? "")}::text[], ${
            batch.map((s) => s.pinned)
          }::boolean[]) AS u(i, p, f, pw, pe, a, g, v, n)
            ON CONFLICT (workflow, execution_id) DO NOTHING
            RETURNING execution_id AS key`
          const started = new Set(
            yield* onlyDatabaseErrors(statements.enqueueEachAfter(
              write,
              batch.map((s) => ({
                key: s.executionId,
                message: runMessage(workflow, s.executionId, s.group, s.pinned ? s.version : null)
              }))
            ))
          )
          const found = entries.filter(({ request }) =>
            !started.has(request.executionId) || firsts.get(request.executionId) !== request
          )
          const stored = found.length === 0 ? new Map<string, string>() : yield* mismatches(workflow, found)
          for (const entry of entries) {
            const { executionId, fingerprint } = entry.request
            const mine = started.has(executionId) && firsts.get(executionId) === entry.request
            const other = stored.get(executionId)
            entry.completeUnsafe(
              Exit.succeed({ started: mine, mismatch: !mine && other !== undefined && other !== fingerprint })
            )
          }
        })
    }),
    BATCH
  )
}
