/**
 * What an operator reads around a deploy of workflow code: which versions the unfinished runs
 * started under (`PgWorkflowEngine`'s `version`) and how many of them diverged, and for each
 * patch (`WorkflowPatch`) how many unfinished runs took or may still take its old branch — the
 * old branch can be dropped from the code once none can. The CLI's `workflows versions` and
 * `workflows patches` use it.
 *
 * @since 0.5.0
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import { classifySqlErrors } from "@effect-durable/pg/ErrorClassification"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Unfinished executions of one workflow started under one deploy version. */
export interface VersionCount {
  readonly workflow: string
  /** `null`: started by an engine given no `version` (or before versions were recorded). */
  readonly version: string | null
  /** Pending, running or suspended. */
  readonly unfinished: number
  /** Of those, stopped on a divergence of their code and journal, waiting for an operator. */
  readonly diverged: number
  /** When the oldest of them started. */
  readonly oldestStartedAt: string
}

/** One patch of a workflow, as its unfinished executions stand. */
export interface PatchUse {
  readonly patch: string
  /** Unfinished runs that took the patched branch. */
  readonly patched: number
  /** Unfinished runs that took the old branch: the code must keep it while any is left. */
  readonly unpatched: number
  /** Unfinished runs that have not reached the patch yet: any of them may still take the old branch. */
  readonly undecided: number
  /** No unfinished run took or may take the old branch: a deploy may drop it (and the patch). */
  readonly droppable: boolean
}

export interface PatchReport {
  readonly workflow: string
  readonly unfinished: number
  /**
   * The patches unfinished runs recorded a branch of, by id. A patch not listed has no unfinished
   * run on either branch: all `unfinished` runs are undecided (`use` says so for any id).
   */
  readonly patches: ReadonlyArray<PatchUse>
}

export interface WorkflowDeploys {
  /** Unfinished executions by workflow and the version they started under (of one workflow, or all). */
  readonly versions: (options?: {
    readonly workflow?: string | undefined
  }) => Effect.Effect<ReadonlyArray<VersionCount>, InvalidInput | DatabaseError>
  readonly patches: (workflow: string) => Effect.Effect<PatchReport, InvalidInput | DatabaseError>
}

/** Patch `id` in a report: its counts, or, when no unfinished run recorded it, every unfinished run undecided. */
export const use = (report: PatchReport, id: string): PatchUse =>
  report.patches.find((patch) => patch.patch === id) ??
    { patch: id, patched: 0, unpatched: 0, undecided: report.unfinished, droppable: report.unfinished === 0 }

const decodeName = Input.argument("workflow", Input.Text(256))

export const make: Effect.Effect<WorkflowDeploys, never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const executions = sql.literal(settings.table("workflow_executions"))
    const steps = sql.literal(settings.table("workflow_steps"))
    return {
      versions: (options = {}) =>
        Effect.gen(function*() {
          const workflow = options.workflow === undefined ? null : yield* decodeName(options.workflow)
          const rows = yield* sql<
            { workflow: string; version: string | null; unfinished: number; diverged: number; oldest: string }
          >`
            SELECT workflow, deploy_version AS version, count(*)::int AS unfinished,
                   count(*) FILTER (WHERE status = 'suspended' AND waiting_on @> '[{"kind":"diverged"}]')::int AS diverged,
                   min(created_at)::text AS oldest
              FROM ${executions}
             WHERE status <> 'complete' AND (${workflow}::text IS NULL OR workflow = ${workflow})
             GROUP BY 1, 2
             ORDER BY 1, 5, 2`.pipe(classifySqlErrors("WorkflowDeploys.versions"))
          return rows.map((row) => ({
            workflow: row.workflow,
            version: row.version,
            unfinished: row.unfinished,
            diverged: row.diverged,
            oldestStartedAt: row.oldest
          }))
        }),
      patches: (workflow) =>
        Effect.gen(function*() {
          const name = yield* decodeName(workflow)
          // The workflow's unfinished executions (a range of the primary key), and the markers of theirs.
          const rows = yield* sql<{ patch: string | null; patched: number; unpatched: number; unfinished: number }>`
            WITH unfinished AS (
              SELECT execution_id FROM ${executions} WHERE workflow = ${name} AND status <> 'complete')
            SELECT s.name AS patch,
                   count(*) FILTER (WHERE s.result = 'true'::jsonb)::int AS patched,
                   count(*) FILTER (WHERE s.result = 'false'::jsonb)::int AS unpatched,
                   (SELECT count(*) FROM unfinished)::int AS unfinished
              FROM unfinished u
              JOIN ${steps} s ON s.workflow = ${name} AND s.execution_id = u.execution_id AND s.kind = 'patch'
             GROUP BY s.name
            UNION ALL
            SELECT NULL, 0, 0, (SELECT count(*) FROM unfinished)::int
             ORDER BY 1 NULLS FIRST`.pipe(classifySqlErrors("WorkflowDeploys.patches"))
          const unfinished = rows[0]?.unfinished ?? 0
          return {
            workflow: name,
            unfinished,
            patches: rows.flatMap((row) => {
              if (row.patch === null) return []
              const undecided = unfinished - row.patched - row.unpatched
              return [{
                patch: row.patch,
                patched: row.patched,
                unpatched: row.unpatched,
                undecided,
                droppable: row.unpatched === 0 && undecided === 0
              }]
            })
          }
        })
    }
  }
)
