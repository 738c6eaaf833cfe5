/**
 * The engine's storage contract: what a driver of executions and their journal gives the run,
 * activity and wait rooms (`store.ts` is the PostgreSQL driver, `memoryStore.ts` the in-memory
 * one), the names both sides use (topics, ordering keys, statuses, waits) and how both call the
 * outbox.
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import type * as LeasedQueue from "@effect-durable/pg/LeasedQueue"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"

/**
 * Runs of workflow `W` are messages of this topic (of `W@<version>` for an execution pinned to
 * its deploy version: only processes of that version claim them); clocks of `W` fire through
 * the next.
 */
export const RUN_TOPIC_PREFIX = "workflow.run:"
export const runTopic = (workflow: string, pinnedTo?: string | null): string =>
  `${RUN_TOPIC_PREFIX}${workflow}${pinnedTo == null ? "" : `@${pinnedTo}`}`
export const clockTopic = (workflow: string): string => `workflow.clock:${workflow}`
/**
 * A deploy version (`PgWorkflowEngine`'s `version`): it names a topic of pinned runs, so it is
 * short and has no `@` (which separates it from the workflow's name there).
 */
export const VERSION_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:+/-]{0,63}$/
export const VERSION_RULE = "1-64 characters: a letter or digit, then letters, digits, . _ : + / -"

/** A journal step's key in a run's journal and a driver's maps: `<kind>/<name>/<attempt>`. */
export const journalKey = (kind: StepKind, name: string, attempt: number) => `${kind}/${name}/${attempt}`
/** An execution's key in this process's maps (a NUL cannot occur in a workflow's name). */
export const runId = (workflow: string, executionId: string) => `${workflow}\u0000${executionId}`

/** One run of an execution at a time: its run messages share this ordering key. */
export const runKey = (workflow: string, executionId: string): string => `${workflow}/${executionId}`

/**
 * An execution's run message; every one carries its flow group (`WorkflowLimits`), if it has
 * one, and goes to the topic of the version it is pinned to, if it is.
 */
export const runMessage = (
  workflow: string,
  executionId: string,
  group: string | null | undefined,
  pinnedTo: string | null | undefined
) => ({
  topic: runTopic(workflow, pinnedTo),
  payload: { executionId },
  options: { orderingKey: runKey(workflow, executionId), ...(group == null ? {} : { group }) }
})

/**
 * The engine's own calls of the outbox (small, well formed messages; ids read from its tables):
 * only a database failure is expected (and classified, so a run can tell it from a defect);
 * anything else is a bug.
 */
export const onlyDatabaseErrors = <A, E extends { readonly _tag: string }, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Extract<E, DatabaseError>, R> =>
  Effect.catchIf(
    effect,
    (error): error is Exclude<E, DatabaseError> => error._tag !== "DatabaseError",
    Effect.die
  ) as Effect.Effect<A, Extract<E, DatabaseError>, R>

/** Message ids in lists the outbox takes at once (at most 10,000). */
export const chunksOf = (ids: ReadonlyArray<string>): ReadonlyArray<ReadonlyArray<string>> =>
  Array.from({ length: Math.ceil(ids.length / 10_000) }, (_, i) => ids.slice(i * 10_000, (i + 1) * 10_000))

/** An execution's statuses, in the order of its life (the table's check constraint holds the same list). */
export const Statuses = ["pending", "running", "suspended", "complete"] as const
export type Status = typeof Statuses[number]
/** A patch's marker (`WorkflowPatch.patched`) records which branch the run took: `true`, the patched one. */
export type StepKind = "activity" | "deferred" | "clock" | "patch"

/** One thing a suspended run waits on, as its settle records it (`workflow_executions.waiting_on`). */
export type WaitingOn =
  | { readonly kind: "deferred"; readonly name: string }
  | { readonly kind: "clock"; readonly name: string }
  | { readonly kind: "child"; readonly workflow: string; readonly executionId: string }
  /** The run failed and `SuspendOnFailure` holds it: an operator's resume. */
  | { readonly kind: "resume" }
  /**
   * The code and the journal diverged (`replay.ts`): `step` is what the code asked for (a new
   * activity, or the run's end), `unreached` the recorded activities it had not asked for again.
   * An operator's resume, under code that agrees with the journal.
   */
  | { readonly kind: "diverged"; readonly step: string; readonly unreached: ReadonlyArray<string> }

export interface ExecutionRow {
  /**
   * Which start of the execution this is (its creation time in microseconds, as text): an
   * execution purged and started again under the same id is another incarnation.
   */
  readonly incarnation: string
  readonly status: Status
  readonly result: unknown
  readonly payload: unknown
  readonly interrupt_requested: boolean
  readonly interrupt_unsafe: boolean
  readonly parent_workflow: string | null
  readonly parent_execution_id: string | null
  /** The version its runs are pinned to (`PgWorkflowEngine`'s `pinned`): its children are pinned to it too. */
  readonly pinned_to: string | null
}

export interface StepRow {
  readonly kind: StepKind
  readonly name: string
  readonly attempt: number
  readonly result: unknown
  /** When it was recorded, as a number that orders the journal (given with a run's journal). */
  readonly recorded?: number
}

export type WakeMode = "explicit" | "automatic"

/** A step's record that stands. */
export interface Recorded {
  readonly inserted: boolean
  readonly result: unknown
}

export interface Store {
  readonly start: (options: {
    readonly workflow: string
    readonly executionId: string
    readonly payload: unknown
    readonly parent: { readonly workflow: string; readonly executionId: string } | undefined
    /** Its searchable attributes (`WorkflowAttributes`), checked; kept only by the first start. */
    readonly attributes: Readonly<Record<string, string>>
    /** The flow group of its runs (`WorkflowLimits.groupBy`), checked; kept only by the first start. */
    readonly group: string | undefined
    /** The deploy version of the code starting it (`PgWorkflowEngine`'s `version`); kept only by the first start. */
    readonly version: string | undefined
    /** Its runs pinned to `version`: only processes of that version run it (kept only by the first start). */
    readonly pinned: boolean
  }) => Effect.Effect<{ readonly started: boolean; readonly mismatch: boolean }, DatabaseError>
  readonly read: (workflow: string, executionId: string) => Effect.Effect<ExecutionRow | undefined, DatabaseError>
  /**
   * Marks a run under way and returns the wake sequence it starts from and the journal as it
   * stands (one round trip), or nothing when there is nothing to run. The journal is the
   * statement's snapshot while the wake sequence is the row's latest (read after any lock wait):
   * a deferred completed while it waited counts in the sequence but may be missing from the
   * journal, so a run must look a deferred it misses up again (`readStep`), never trust the
   * journal alone for deferreds.
   */
  readonly beginRun: (
    workflow: string,
    executionId: string
  ) => Effect.Effect<
    { readonly row: ExecutionRow; readonly wakeSeq: string; readonly steps: ReadonlyArray<StepRow> } | undefined,
    DatabaseError
  >
  readonly step: (
    workflow: string,
    executionId: string,
    kind: StepKind,
    name: string,
    attempt: number
  ) => Effect.Effect<StepRow | undefined, DatabaseError>
  /**
   * Records a step if it has no record yet and returns the record that stands (first write
   * wins). An activity's record is one round trip; a deferred's also wakes the execution, in
   * one transaction.
   */
  readonly recordStep: (
    workflow: string,
    executionId: string,
    kind: StepKind,
    name: string,
    attempt: number,
    result: unknown
  ) => Effect.Effect<Recorded, DatabaseError>
  /**
   * A transactional activity: its journal row is taken first (first writer wins; a second one
   * waits for the first's commit, then reads its result), `body` runs in the same transaction
   * and its result is written before the commit — the body's SQL and its journal row commit
   * together or not at all. `body` returning `undefined` (the activity suspended) rolls
   * everything back and returns `undefined`; `body` failing (a database failure that is not the
   * activity's result) rolls everything back and fails.
   */
  readonly transactionalStep: <R>(
    workflow: string,
    executionId: string,
    name: string,
    attempt: number,
    body: Effect.Effect<unknown, DatabaseError, R>
  ) => Effect.Effect<{ readonly inserted: boolean; readonly result: unknown } | undefined, DatabaseError, R>
  /** Bumps the wake sequence; a suspended execution the wake may wake becomes pending and gets a run. */
  readonly wake: (workflow: string, executionId: string, mode: WakeMode) => Effect.Effect<void, DatabaseError>
  readonly requestInterrupt: (
    workflow: string,
    executionId: string,
    unsafe: boolean
  ) => Effect.Effect<boolean, DatabaseError>
  readonly scheduleClock: (
    workflow: string,
    executionId: string,
    name: string,
    deferredName: string,
    delay: Duration.Duration
  ) => Effect.Effect<void, DatabaseError>
  /**
   * Ends a run atomically, fenced by the run message's claim: a runner that lost its lease
   * writes nothing (returns false). `suspended` settles pending (and schedules the next
   * run) when a wake landed since `wakeSeq` that may wake it, or when `rerun` asks for one.
   */
  readonly settle: (options: {
    readonly workflow: string
    readonly executionId: string
    /** The run message's claim: the settle writes only while it still holds, its lease running. */
    readonly claim: LeasedQueue.Claim
    readonly wakeSeq: string
    readonly result: unknown
    readonly complete: boolean
    readonly failed: boolean
    /** Settle pending with a next run whatever the wake sequence says (a preempted run). */
    readonly rerun: boolean
    /** What a suspended run waits on (kept while it is suspended, for operators). */
    readonly waits: ReadonlyArray<WaitingOn>
  }) => Effect.Effect<{ readonly fenced: boolean; readonly status: Status | undefined }, DatabaseError>
}
