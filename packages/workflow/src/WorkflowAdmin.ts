/**
 * What an operator does with workflow executions, without the workflows' code: list them,
 * show one with its journal, interrupt it, resume it. The CLI's `workflows` commands use it.
 * Interrupt and resume go through the same statements as the engine's own (`interrupt`,
 * `resume`): the execution's next run, wherever its workflow is registered, applies them.
 *
 * @since 0.2.0
 */
import { type DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import { classifySqlErrors } from "@effect-durable/pg/ErrorClassification"
import type * as LeasedQueue from "@effect-durable/pg/LeasedQueue"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxStatements from "@effect-durable/pg/OutboxStatements"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as Store from "./internal/store.js"
import type { WaitDetail, WaitingOn } from "./internal/waitDetail.js"
import * as WaitDetails from "./internal/waitDetail.js"
import * as WorkflowAttributes from "./WorkflowAttributes.js"

/** An execution's statuses, in the order of its life. */
export const Statuses = Store.Statuses
export type Status = Store.Status

export type { WaitDetail, WaitingOn } from "./internal/waitDetail.js"

/** Suspended executions counted by what they wait on, pending ones of a limited workflow as `limit` (`waiting`). */
export interface WaitCount {
  readonly workflow: string
  /**
   * `unknown`: suspended before the schema recorded waits (version 2; its next run says), or on
   * nothing the engine can name (a bare `Workflow.suspend`).
   */
  readonly kind: WaitingOn["kind"] | "unknown"
  /** The deferred's or clock's name, the child's workflow, the limit's group; empty for `resume` and `unknown`. */
  readonly name: string
  readonly executions: number
  /** When the longest-waiting of them last changed. */
  readonly since: string
}

export interface ExecutionSummary {
  readonly workflow: string
  readonly executionId: string
  readonly status: Status
  /**
   * What it waits on, when suspended (null otherwise, or when suspended before waits were
   * recorded); when pending under a limit, the limit.
   */
  readonly waitingOn: ReadonlyArray<WaitingOn> | null
  /** The flow group of its runs (`WorkflowLimits.groupBy`); null when it has none. */
  readonly group: string | null
  /** The deploy version it started under (`PgWorkflowEngine`'s `version`); null when none was given. */
  readonly version: string | null
  /** Its searchable attributes (`WorkflowAttributes`). */
  readonly attributes: Readonly<Record<string, string>>
  readonly runs: number
  readonly payloadMismatches: number
  readonly interruptRequested: boolean
  readonly parent: { readonly workflow: string; readonly executionId: string } | null
  readonly createdAt: string
  readonly updatedAt: string
  readonly completedAt: string | null
}

export interface ExecutionDetail extends ExecutionSummary {
  /** `waitingOn` in detail: each clock's due time, each child's status. */
  readonly waits: ReadonlyArray<WaitDetail> | null
  readonly payload: unknown
  /** The last run's encoded `Workflow.Result`. */
  readonly result: unknown
  readonly steps: ReadonlyArray<{
    readonly kind: Store.StepKind
    readonly name: string
    readonly attempt: number
    readonly result: unknown
    readonly recordedAt: string
  }>
}

export interface WorkflowAdmin {
  /** Executions, most recently changed first (at most `limit`, 1 to 1,000). */
  readonly list: (options: {
    readonly workflow?: string | undefined
    readonly status?: Status | undefined
    /** Only executions carrying every one of these attributes (`WorkflowAttributes`). */
    readonly attributes?: Readonly<Record<string, string>> | undefined
    readonly limit: number
  }) => Effect.Effect<ReadonlyArray<ExecutionSummary>, InvalidInput | DatabaseError>
  readonly show: (
    workflow: string,
    executionId: string
  ) => Effect.Effect<ExecutionDetail | undefined, InvalidInput | DatabaseError>
  /**
   * The execution id an operator typed: an id of this workflow as it is, else the one id that
   * starts with it (at least `MIN_PREFIX_LENGTH` characters: a short form from a list). Two or
   * more ids starting with it is `InvalidInput`; so is a short form that is one execution's
   * whole id and the start of another's (both are listed alike); none, `undefined`.
   */
  readonly resolve: (
    workflow: string,
    idOrPrefix: string
  ) => Effect.Effect<string | undefined, InvalidInput | DatabaseError>
  /** Suspended executions counted by what they wait on, the most waited-on first (of one workflow, or all). */
  readonly waiting: (options?: {
    readonly workflow?: string | undefined
  }) => Effect.Effect<ReadonlyArray<WaitCount>, InvalidInput | DatabaseError>
  /** Asks a durable interrupt; false when the execution is complete or unknown. */
  readonly interrupt: (workflow: string, executionId: string) => Effect.Effect<boolean, InvalidInput | DatabaseError>
  /** Wakes a suspended execution (a `SuspendOnFailure` one too); false when it is not suspended. */
  readonly resume: (workflow: string, executionId: string) => Effect.Effect<boolean, InvalidInput | DatabaseError>
  /**
   * Deletes executions complete for longer than `olderThan` (at least `PURGE_FLOOR`) with their
   * journal, `batchSize` (default 1000) executions per committed statement; returns how many.
   * A child whose parent is not complete is kept: the parent's replay reads its result.
   */
  readonly purge: (options: LeasedQueue.PurgeOptions) => Effect.Effect<number, InvalidInput | DatabaseError>
  /** How many executions `purge({ olderThan })` would delete now. */
  readonly purgeable: (olderThan: Duration.Input) => Effect.Effect<number, InvalidInput | DatabaseError>
}

/** Retention floor of `purge`: executions complete for less than this are never deleted. */
export const PURGE_FLOOR = "1 hour"

/**
 * How many characters of a long execution id its short form keeps (the ids `Workflow` derives
 * from an idempotency key are 64 hex characters): what `workflows list` and the page show, and
 * what `resolve` takes back as a prefix.
 */
export const SHORT_ID_LENGTH = 12

/** An execution id as lists show it: its first `SHORT_ID_LENGTH` characters when it is long. */
export const shortId = (executionId: string): string =>
  executionId.length > SHORT_ID_LENGTH + 4 ? executionId.slice(0, SHORT_ID_LENGTH) : executionId

/** A wait in words, as the CLI and the page show it: `deferred Approved`, `clock cool-off due …`. */
export const describeWait = (wait: WaitingOn | WaitDetail): string => {
  switch (wait.kind) {
    case "deferred":
      return `deferred ${wait.name}`
    case "clock":
      return `clock ${wait.name}${"dueAt" in wait && wait.dueAt !== null ? ` due ${wait.dueAt}` : ""}`
    case "child":
      return `child ${wait.workflow} ${shortId(wait.executionId)}${
        "status" in wait ? ` (${wait.status ?? "gone"})` : ""
      }`
    case "resume":
      return "an operator's resume (its run failed)"
    case "diverged":
      return `an operator's resume: diverged, the code asked for ${
        wait.step === "the run's end" ? "its end" : wait.step
      } where the journal holds ${wait.unreached.join(", ")}`
    case "limit":
      return `the workflow's limit${wait.group === null ? "" : ` (group ${wait.group})`}`
  }
}

/** The fewest characters a prefix must have to name an execution. */
export const MIN_PREFIX_LENGTH = 6

const decodeName = Input.argument("workflow", Input.Text(256))
const decodeId = Input.argument("executionId", Input.Text(256))
const decodeStatus = Input.argument("status", Schema.Literals(Statuses))
const decodeLimit = Input.argument("limit", Input.Count(1_000))
const decodeOlderThan = Input.argument("olderThan", Input.DurationIn({ min: PURGE_FLOOR, max: "520 weeks" }))
const decodeBatchSize = Input.argument("batchSize", Input.Count(10_000))

interface Row {
  readonly workflow: string
  readonly execution_id: string
  readonly status: Status
  readonly runs: number
  readonly payload_mismatches: number
  readonly interrupt_requested: boolean
  readonly parent_workflow: string | null
  readonly parent_execution_id: string | null
  readonly created_at: string
  readonly updated_at: string
  readonly completed_at: string | null
  readonly waiting_on: ReadonlyArray<WaitingOn> | null
  readonly attributes: Readonly<Record<string, string>>
  readonly run_group: string | null
  readonly deploy_version: string | null
}

const summary = (row: Row): ExecutionSummary => ({
  workflow: row.workflow,
  executionId: row.execution_id,
  status: row.status,
  waitingOn: row.status === "suspended" || row.status === "pending" ? row.waiting_on : null,
  group: row.run_group,
  version: row.deploy_version,
  attributes: row.attributes,
  runs: row.runs,
  payloadMismatches: row.payload_mismatches,
  interruptRequested: row.interrupt_requested,
  parent: row.parent_workflow === null || row.parent_execution_id === null
    ? null
    : { workflow: row.parent_workflow, executionId: row.parent_execution_id },
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  completedAt: row.completed_at
})

export const make: Effect.Effect<
  WorkflowAdmin,
  never,
  SqlClient.SqlClient | DurableSettings | Outbox.Outbox | OutboxStatements.OutboxStatements
> = Effect
  .gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const outbox = yield* Outbox.Outbox
    const store = Store.make(sql, settings, outbox, yield* OutboxStatements.OutboxStatements)
    const executions = sql.literal(settings.table("workflow_executions"))
    const steps = sql.literal(settings.table("workflow_steps"))
    const limits = sql.literal(settings.table("flow_limits"))
    const groupLimits = sql.literal(settings.table("flow_group_limits"))
    // A limit of its workflow's runs that applies to execution `e`: the workflow's own (in
    // flight, rate), or, for an execution with a group, a per-group one (the claim applies no
    // per-group limit to a message without a group).
    const limitApplies = sql`EXISTS (
      SELECT 1 FROM ${limits} l
       WHERE l.topic = ${Store.RUN_TOPIC_PREFIX} || e.workflow
         AND (l.max_in_flight IS NOT NULL OR l.rate_limit IS NOT NULL
              OR (e.run_group IS NOT NULL
                  AND (l.group_max_in_flight IS NOT NULL OR l.group_rate_limit IS NOT NULL
                       OR EXISTS (SELECT 1 FROM ${groupLimits} g WHERE g.topic = l.topic AND g.group_key = e.run_group)))))`
    // A pending execution under a limit that applies to it: its next run queues behind it.
    const columns = sql`e.workflow, e.execution_id, e.status, e.runs, e.payload_mismatches, e.interrupt_requested,
      e.parent_workflow, e.parent_execution_id, e.created_at::text, e.updated_at::text, e.completed_at::text, e.attributes,
      e.run_group, e.deploy_version,
      CASE WHEN e.status <> 'pending' THEN e.waiting_on
           WHEN ${limitApplies} THEN jsonb_build_array(jsonb_build_object('kind', 'limit', 'group', e.run_group))
      END AS waiting_on`
    // Complete for longer than the retention, and not a child its unfinished parent may still read.
    const purgeableWhere = (seconds: number) =>
      sql`e.completed_at < now() - make_interval(secs => ${seconds})
          AND NOT EXISTS (SELECT 1 FROM ${executions} p
                           WHERE p.workflow = e.parent_workflow AND p.execution_id = e.parent_execution_id
                             AND p.status <> 'complete')`
    const retention = (olderThan: Duration.Input) =>
      Effect.map(decodeOlderThan(olderThan), (duration) => Duration.toMillis(duration) / 1000)
    const identify = (workflow: string, executionId: string) =>
      Effect.all([decodeName(workflow), decodeId(executionId)])
    const detail = WaitDetails.make(sql, settings, outbox)
    return {
      waiting: (options = {}) =>
        Effect.gen(function*() {
          const workflow = options.workflow === undefined ? null : yield* decodeName(options.workflow)
          const rows = yield* sql<
            { workflow: string; kind: WaitCount["kind"]; name: string; n: number; since: string }
          >`
            SELECT e.workflow, coalesce(w->>'kind', 'unknown') AS kind,
                   coalesce(w->>'name', w->>'workflow', w->>'step', '') AS name, count(*)::int AS n, min(e.updated_at)::text AS since
              FROM ${executions} e
              LEFT JOIN LATERAL jsonb_array_elements(e.waiting_on) w ON true
             WHERE e.status = 'suspended' AND (${workflow}::text IS NULL OR e.workflow = ${workflow})
             GROUP BY 1, 2, 3
            UNION ALL
            SELECT e.workflow, 'limit', coalesce(e.run_group, ''), count(*)::int, min(e.updated_at)::text
              FROM ${executions} e
             WHERE e.status = 'pending' AND (${workflow}::text IS NULL OR e.workflow = ${workflow}) AND ${limitApplies}
             GROUP BY 1, 2, 3
             ORDER BY 4 DESC, 1, 2, 3`.pipe(classifySqlErrors("WorkflowAdmin.waiting"))
          return rows.map((row) => ({
            workflow: row.workflow,
            kind: row.kind,
            name: row.name,
            executions: row.n,
            since: row.since
          }))
        }),
      resolve: (workflow, idOrPrefix) =>
        Effect.gen(function*() {
          const [name, typed] = yield* identify(workflow, idOrPrefix)
          // LIKE's own characters in an id are literal here.
          const pattern = `${typed.replace(/[\\%_]/g, (c) => `\\${c}`)}%`
          const rows = yield* sql<{ execution_id: string }>`
            (SELECT execution_id FROM ${executions} WHERE workflow = ${name} AND execution_id = ${typed})
            UNION ALL
            (SELECT execution_id FROM ${executions}
              WHERE workflow = ${name} AND ${typed.length >= MIN_PREFIX_LENGTH}
                AND execution_id LIKE ${pattern} AND execution_id <> ${typed}
              ORDER BY execution_id LIMIT 2)`.pipe(classifySqlErrors("WorkflowAdmin.resolve"))
          const exact = rows.some((row) => row.execution_id === typed)
          const longer = rows.filter((row) => row.execution_id !== typed).length
          if (exact && !(typed.length === SHORT_ID_LENGTH && longer > 0)) return typed
          if (rows.length > 1) {
            return yield* Effect.fail(
              new InvalidInput({
                argument: "executionId",
                rule:
                  `an id, or a prefix only one execution of ${name} starts with (more than one starts with ${typed}: give more characters)`
              })
            )
          }
          return rows[0]?.execution_id
        }),
      list: (options) =>
        Effect.gen(function*() {
          const limit = yield* decodeLimit(options.limit)
          const workflow = options.workflow === undefined ? null : yield* decodeName(options.workflow)
          const status = options.status === undefined ? null : yield* decodeStatus(options.status)
          const attributes = options.attributes === undefined
            ? {}
            : yield* WorkflowAttributes.validate(options.attributes)
          const rows = yield* sql<Row>`
            SELECT ${columns} FROM ${executions} e
             WHERE (${workflow}::text IS NULL OR workflow = ${workflow})
               AND (${status}::text IS NULL OR status = ${status})
               ${
            Object.keys(attributes).length === 0
              ? sql``
              : sql`AND attributes @> ${JSON.stringify(attributes)}::jsonb`
          }
             ORDER BY updated_at DESC, workflow, execution_id
             LIMIT ${limit}`.pipe(classifySqlErrors("WorkflowAdmin.list"))
          return rows.map(summary)
        }),
      show: (workflow, executionId) =>
        Effect.gen(function*() {
          const [name, id] = yield* identify(workflow, executionId)
          const rows = yield* sql<Row & { payload: unknown; result: unknown }>`
            SELECT ${columns}, e.payload, e.result FROM ${executions} e
             WHERE workflow = ${name} AND execution_id = ${id}`.pipe(classifySqlErrors("WorkflowAdmin.show"))
          const row = rows[0]
          if (row === undefined) return undefined
          const journal = yield* sql<
            { kind: Store.StepKind; name: string; attempt: number; result: unknown; recorded_at: string }
          >`
            SELECT kind, name, attempt, result, recorded_at::text FROM ${steps}
             WHERE workflow = ${name} AND execution_id = ${id}
             ORDER BY recorded_at, kind, name, attempt`.pipe(classifySqlErrors("WorkflowAdmin.show"))
          const listed = summary(row)
          return {
            ...listed,
            waits: listed.waitingOn === null ? null : yield* detail(name, id, listed.waitingOn),
            payload: row.payload,
            result: row.result,
            steps: journal.map((step) => ({
              kind: step.kind,
              name: step.name,
              attempt: step.attempt,
              result: step.result,
              recordedAt: step.recorded_at
            }))
          }
        }),
      interrupt: (workflow, executionId) =>
        Effect.flatMap(identify(workflow, executionId), ([name, id]) => store.requestInterrupt(name, id, false)),
      purge: (options) =>
        Effect.gen(function*() {
          const seconds = yield* retention(options.olderThan)
          const batchSize = yield* decodeBatchSize(options.batchSize ?? 1000)
          let total = 0
          while (true) {
            // One statement per batch: the executions and their steps go together or not at all.
            const [row] = yield* sql<{ n: number }>`
              WITH gone AS (
                DELETE FROM ${executions} WHERE (workflow, execution_id) IN (
                  SELECT e.workflow, e.execution_id FROM ${executions} e
                   WHERE ${purgeableWhere(seconds)}
                   ORDER BY e.completed_at LIMIT ${batchSize} FOR UPDATE SKIP LOCKED)
                RETURNING workflow, execution_id),
              journal AS (
                DELETE FROM ${steps} s USING gone g WHERE s.workflow = g.workflow AND s.execution_id = g.execution_id)
              SELECT count(*)::int AS n FROM gone`.pipe(classifySqlErrors("WorkflowAdmin.purge"))
            total += row!.n
            if (row!.n > 0) yield* Effect.logDebug(`effect-durable: workflow purge deleted ${total} executions so far`)
            if (row!.n < batchSize) return total
          }
        }),
      purgeable: (olderThan) =>
        Effect.gen(function*() {
          const seconds = yield* retention(olderThan)
          const [row] = yield* sql<{ n: number }>`
            SELECT count(*)::int AS n FROM ${executions} e WHERE ${purgeableWhere(seconds)}`.pipe(
            classifySqlErrors("WorkflowAdmin.purgeable")
          )
          return row!.n
        }),
      resume: (workflow, executionId) =>
        Effect.flatMap(identify(workflow, executionId), ([name, id]) =>
          Effect.gen(function*() {
            const row = yield* store.read(name, id)
            if (row?.status !== "suspended") return false
            yield* store.wake(name, id, "explicit")
            return true
          }))
    }
  })
