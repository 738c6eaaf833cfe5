/**
 * What an operator reads and does around a deploy of workflow code: which versions the
 * unfinished runs run on (`PgWorkflowEngine`'s `version`), how many of them diverged or are
 * stranded (pinned to a version no live process serves), and for each patch (`WorkflowPatch`)
 * how many unfinished runs took or may still take its old branch — the old branch can be dropped
 * from the code once none can; a run moved to another version (`repin`), or restarted from one of
 * its steps as a new execution (`fork`). The CLI's `workflows versions | patches | stranded |
 * repin | fork` and the page use it.
 *
 * @since 0.5.0
 */
import { type DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import { classifySqlErrors } from "@effect-durable/pg/ErrorClassification"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxStatements from "@effect-durable/pg/OutboxStatements"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { randomBytes } from "node:crypto"
import type { StepKind } from "./internal/storeContract.js"
import {
  onlyDatabaseErrors,
  RUN_TOPIC_PREFIX,
  runKey,
  runMessage,
  runTopic,
  VERSION_PATTERN,
  VERSION_RULE
} from "./internal/storeContract.js"

/** Unfinished executions of one workflow started under one deploy version. */
export interface VersionCount {
  readonly workflow: string
  /** `null`: started by an engine given no `version` (or before versions were recorded). */
  readonly version: string | null
  /** Pending, running or suspended. */
  readonly unfinished: number
  /** Of those, stopped on a divergence of their code and journal, waiting for an operator. */
  readonly diverged: number
  /** Of those, runs due on a version's topic for longer than `STRANDED_AFTER` that no process claimed: no live process serves it. */
  readonly stranded: number
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

/** An execution whose run waits on a version's topic that nobody claims: no process of that version is running. */
export interface StrandedRun {
  readonly workflow: string
  readonly executionId: string
  readonly version: string
  /** Since when its run has been due. */
  readonly dueSince: string
}

/** A pinned run due for longer than this, unclaimed, is stranded (a claim takes one within a poll interval). */
export const STRANDED_AFTER = "1 minute"

export interface WorkflowDeploys {
  /** Unfinished executions by workflow and the version they started under (of one workflow, or all). */
  readonly versions: (options?: {
    readonly workflow?: string | undefined
  }) => Effect.Effect<ReadonlyArray<VersionCount>, InvalidInput | DatabaseError>
  readonly patches: (workflow: string) => Effect.Effect<PatchReport, InvalidInput | DatabaseError>
  /**
   * Pinned executions whose run has been due for longer than `after` (default `STRANDED_AFTER`)
   * with no process claiming it, the longest waiting first (at most `limit`, 1 to 1,000): deploy
   * (or keep) a process of their version, or move them to another (`repin`).
   */
  readonly stranded: (options: {
    readonly workflow?: string | undefined
    readonly after?: Duration.Input | undefined
    readonly limit: number
  }) => Effect.Effect<ReadonlyArray<StrandedRun>, InvalidInput | DatabaseError>
  /**
   * Pins an unfinished execution to another version (`null`: unpins it, any process runs it):
   * its version becomes that one, and its run, if one is due and not held, moves to that
   * version's topic; later runs follow. For a stranded run, or a diverged one to resume under
   * code that agrees with its journal (then `WorkflowAdmin.resume` it). False when it is complete
   * or unknown.
   */
  readonly repin: (
    workflow: string,
    executionId: string,
    version: string | null
  ) => Effect.Effect<boolean, InvalidInput | DatabaseError>
  /**
   * Restarts an execution from one of its steps, as a new execution (a fork): its payload, and its
   * journal up to that step (the steps recorded before it; not its clocks, which the fork schedules
   * again), then a run. The step and everything after it run again there; the original is left as
   * it is (interrupt it if it must not go on). The fork runs on `version` (pinned; `null`: any
   * process), by default as the original does; it is not a child of the original's parent. The new
   * execution's id (`as`, default `<id>/fork-<8 hex>`), or `undefined` when there is no such
   * execution; a step its journal does not hold, or an id taken, is `InvalidInput`.
   */
  readonly fork: (options: {
    readonly workflow: string
    readonly executionId: string
    readonly from: { readonly kind: StepKind; readonly name: string; readonly attempt?: number | undefined }
    readonly as?: string | undefined
    readonly version?: string | null | undefined
  }) => Effect.Effect<string | undefined, InvalidInput | DatabaseError>
}

/** Patch `id` in a report: its counts, or, when no unfinished run recorded it, every unfinished run undecided. */
export const use = (report: PatchReport, id: string): PatchUse =>
  report.patches.find((patch) => patch.patch === id) ??
    { patch: id, patched: 0, unpatched: 0, undecided: report.unfinished, droppable: report.unfinished === 0 }

const decodeName = Input.argument("workflow", Input.Text(256))
const decodeAfter = Input.argument("after", Input.DurationIn({ min: "0 seconds", max: "520 weeks" }))
const decodeLimit = Input.argument("limit", Input.Count(1_000))
const decodeId = Input.argument("executionId", Input.Text(256))
const decodeVersion = Input.argument(
  "version",
  Schema.NullOr(Schema.String.check(Schema.isPattern(VERSION_PATTERN, { message: VERSION_RULE })))
)
const decodeKind = Input.argument("from.kind", Schema.Literals(["activity", "deferred", "clock", "patch"]))
const decodeStep = Input.argument("from.name", Input.Text(1024))
const decodeAttempt = Input.argument(
  "from.attempt",
  Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 1_000_000 }))
)
const decodeForkId = Input.argument("as", Input.Text(256))

export const make: Effect.Effect<
  WorkflowDeploys,
  never,
  SqlClient.SqlClient | DurableSettings | Outbox.Outbox | OutboxStatements.OutboxStatements
> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const enqueue = (yield* Outbox.Outbox).enqueue
    const executions = sql.literal(settings.table("workflow_executions"))
    const steps = sql.literal(settings.table("workflow_steps"))
    const statements = yield* OutboxStatements.OutboxStatements
    /**
     * An open run message of execution `e` on a version's topic (`workflow.run:<W>@<version>`),
     * due for longer than `seconds` and held by nobody: no live process serves that version. (A
     * message a runner held while the execution was repinned stays where it was: found here too.)
     */
    const strandedMessage = (seconds: number) =>
      statements.waitingUnclaimed({
        orderingKey: sql`e.workflow || '/' || e.execution_id`,
        topicPrefix: sql`${RUN_TOPIC_PREFIX} || e.workflow || '@'`,
        seconds
      })
    const strandedRun = (seconds: number) =>
      sql`e.status IN ('pending', 'running') AND EXISTS (${strandedMessage(seconds)})`
    const defaultAfter = Duration.toSeconds(Duration.fromInputUnsafe(STRANDED_AFTER))
    return {
      versions: (options = {}) =>
        Effect.gen(function*() {
          const workflow = options.workflow === undefined ? null : yield* decodeName(options.workflow)
          const rows = yield* sql<
            {
              workflow: string
              version: string | null
              unfinished: number
              diverged: number
              stranded: number
              oldest: string
            }
          >`
            SELECT workflow, deploy_version AS version, count(*)::int AS unfinished,
                   count(*) FILTER (WHERE status = 'suspended' AND waiting_on @> '[{"kind":"diverged"}]')::int AS diverged,
                   count(*) FILTER (WHERE ${strandedRun(defaultAfter)})::int AS stranded,
                   min(created_at)::text AS oldest
              FROM ${executions} e
             WHERE status <> 'complete' AND (${workflow}::text IS NULL OR workflow = ${workflow})
             GROUP BY 1, 2
             ORDER BY workflow, oldest, version`.pipe(classifySqlErrors("WorkflowDeploys.versions"))
          return rows.map((row) => ({
            workflow: row.workflow,
            version: row.version,
            unfinished: row.unfinished,
            diverged: row.diverged,
            stranded: row.stranded,
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
        }),
      stranded: (options) =>
        Effect.gen(function*() {
          const workflow = options.workflow === undefined ? null : yield* decodeName(options.workflow)
          const seconds = options.after === undefined
            ? defaultAfter
            : Duration.toSeconds(yield* decodeAfter(options.after))
          const limit = yield* decodeLimit(options.limit)
          const rows = yield* sql<{ workflow: string; execution_id: string; topic: string; due_since: string }>`
            SELECT e.workflow, e.execution_id, m.topic, m.available_at::text AS due_since
              FROM ${executions} e
              CROSS JOIN LATERAL (${strandedMessage(seconds)} ORDER BY o.available_at LIMIT 1) m
             WHERE (${workflow}::text IS NULL OR e.workflow = ${workflow}) AND e.status IN ('pending', 'running')
             ORDER BY m.available_at, e.workflow, e.execution_id
             LIMIT ${limit}`.pipe(classifySqlErrors("WorkflowDeploys.stranded"))
          return rows.map((row) => ({
            workflow: row.workflow,
            executionId: row.execution_id,
            // The version whose topic holds it: after the last `@` (a version has none).
            version: row.topic.slice(row.topic.lastIndexOf("@") + 1),
            dueSince: row.due_since
          }))
        }),
      repin: (workflow, executionId, version) =>
        Effect.gen(function*() {
          const name = yield* decodeName(workflow)
          const id = yield* decodeId(executionId)
          const to = yield* decodeVersion(version)
          const plain = runTopic(name)
          return yield* sql.withTransaction(Effect.gen(function*() {
            const rows = yield* sql<{ n: number }>`
              UPDATE ${executions} SET deploy_version = coalesce(${to}, deploy_version), pinned = ${to !== null},
                     updated_at = now()
               WHERE workflow = ${name} AND execution_id = ${id} AND status <> 'complete'
              RETURNING 1 AS n`
            if (rows.length === 0) return false
            // Its due run, wherever it was routed (its workflow's topic or a version's), unless a runner holds it.
            yield* statements.moveTopic({
              orderingKey: runKey(name, id),
              from: plain,
              fromPrefix: `${plain}@`,
              to: runTopic(name, to)
            })
            return true
          })).pipe(classifySqlErrors("WorkflowDeploys.repin"))
        }),
      fork: (options) =>
        Effect.gen(function*() {
          const name = yield* decodeName(options.workflow)
          const id = yield* decodeId(options.executionId)
          const kind = yield* decodeKind(options.from.kind)
          const step = yield* decodeStep(options.from.name)
          const attempt = yield* decodeAttempt(options.from.attempt ?? (kind === "activity" ? 1 : 0))
          const forked = yield* decodeForkId(options.as ?? `${id.slice(0, 200)}/fork-${randomBytes(4).toString("hex")}`)
          const version = options.version === undefined ? undefined : yield* decodeVersion(options.version)
          const refused = (argument: string, rule: string) => Effect.fail(new InvalidInput({ argument, rule }))
          return yield* sql.withTransaction(Effect.gen(function*() {
            const [original] = yield* sql<
              { run_group: string | null; deploy_version: string | null; pinned: boolean; at: string | null }
            >`
              SELECT e.run_group, e.deploy_version, e.pinned,
                     (SELECT s.recorded_at::text FROM ${steps} s
                       WHERE s.workflow = e.workflow AND s.execution_id = e.execution_id
                         AND s.kind = ${kind} AND s.name = ${step} AND s.attempt = ${attempt}) AS at
                FROM ${executions} e WHERE e.workflow = ${name} AND e.execution_id = ${id}`
            if (original === undefined) return undefined
            if (original.at === null) {
              return yield* refused(
                "from",
                `a step the journal of ${id} holds (${kind} ${step}, attempt ${attempt} is not)`
              )
            }
            const runsOn = version === undefined ? (original.pinned ? original.deploy_version : null) : version
            const created = yield* sql<{ n: number }>`
              INSERT INTO ${executions} (workflow, execution_id, payload, payload_fingerprint, attributes, run_group,
                                         deploy_version, pinned)
              SELECT workflow, ${forked}, payload, payload_fingerprint, attributes, run_group,
                     coalesce(${runsOn}, deploy_version), ${runsOn !== null}
                FROM ${executions} WHERE workflow = ${name} AND execution_id = ${id}
              ON CONFLICT (workflow, execution_id) DO NOTHING
              RETURNING 1 AS n`
            if (created.length === 0) return yield* refused("as", `an execution id of ${name} not taken (${forked} is)`)
            yield* sql`
              INSERT INTO ${steps} (workflow, execution_id, kind, name, attempt, result, recorded_at)
              SELECT workflow, ${forked}, kind, name, attempt, result, recorded_at FROM ${steps}
               WHERE workflow = ${name} AND execution_id = ${id} AND kind <> 'clock'
                 AND recorded_at < ${original.at}::timestamptz`
            const message = runMessage(name, forked, original.run_group, runsOn)
            yield* onlyDatabaseErrors(enqueue(message.topic, message.payload, message.options))
            return forked
          })).pipe(classifySqlErrors("WorkflowDeploys.fork"))
        })
    }
  }
)
