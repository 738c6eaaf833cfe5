/**
 * What the engine's rooms share: its store, the runs this process is running, and one rule for
 * every database call — outside a run it is retried then a defect, inside a run it abandons the
 * run, so a database failure never becomes a workflow's outcome.
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import type * as Outbox from "@effect-durable/pg/Outbox"
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Deferred from "effect/Deferred"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as SqlClient from "effect/sql/SqlClient"
import type * as Workflow from "effect/workflow/Workflow"
import type { WorkflowEngine } from "effect/workflow/WorkflowEngine"
import { WorkflowInstance } from "effect/workflow/WorkflowEngine"
import * as WorkflowEngineModule from "effect/workflow/WorkflowEngine"
import type * as PgWorkflowEngine from "../PgWorkflowEngine.js"
import { WorkflowStore } from "../WorkflowStore.js"
import * as Preemption from "./preemption.js"
import type { Run } from "./run.js"
import * as Store from "./storeContract.js"

/** A registered workflow: its definition and how one of its executions runs. */
export interface Registration {
  readonly workflow: Workflow.Any
  readonly execute: (
    payload: object,
    executionId: string
  ) => Effect.Effect<unknown, unknown, WorkflowInstance | WorkflowEngine>
}

export interface EngineContext {
  /** The PostgreSQL client, when the store is PostgreSQL's (in memory: no transactions). */
  readonly sql: SqlClient.SqlClient | undefined
  readonly store: Store.Store
  readonly workerId: string
  /** The public module's metrics and activity mark, handed in: a value import of them would be a cycle. */
  readonly metrics: typeof PgWorkflowEngine.metrics
  readonly Transactional: typeof PgWorkflowEngine.Transactional
  /** What a replay that diverges from its journal does (`replay.ts`), and its quiet window. */
  readonly replay: ReplaySettings
  /**
   * A replay of journals taken from elsewhere (`replayer.ts`): a run stops, suspended, where the
   * code asks for a step its journal does not hold (a new activity, a child); nothing runs.
   */
  readonly replayOnly: boolean
  /**
   * Done when the engine closes: callers still waiting for a result are interrupted then, as
   * upstream's engines interrupt them (the execution itself goes on in another process).
   */
  readonly shutdown: Deferred.Deferred<void>
  readonly engineScope: Scope.Scope
  readonly workflows: Map<string, Registration>
  /**
   * By the run's instance, through its scope (upstream's durable races run their branches on
   * copies of the instance, `{ ...instance }`, which share its scope): two runs of one
   * execution in this process (a stalled one and its replay) never share a journal.
   */
  readonly runsByInstance: WeakMap<Scope.Scope, Run>
  /** By execution (`runId`): the latest, for `interruptUnsafe`. */
  readonly latestRuns: Map<string, Run>
  readonly deferredState: WorkflowEngineModule.DeferredState
  /**
   * A deferred's completion landed in this process: the run of its execution here that is
   * parked on it is interrupted and replays at once. Not a run that has already read the
   * completion (its journal holds it): upstream keeps a deferred registered as awaited for the
   * rest of a run once awaited, so a wake that came late (the completion and the next run's
   * message commit together; that run begins and reads it before the wake arrives) would cut
   * the run wherever it is, an activity included, which then ran twice.
   */
  readonly preempt: (executionId: string, deferredName: string) => Effect.Effect<void>
  /** A call that cannot fail: retryable failures retried, the rest a defect. */
  readonly orDie: <A, R = never>(effect: Effect.Effect<A, DatabaseError, R>) => Effect.Effect<A, never, R>
  /**
   * Inside a run, a database failure must not become the workflow's outcome (a captured
   * defect would complete it): the run is abandoned — interrupted, its durable finalizers
   * skipped — and its message retried, so the execution replays.
   */
  readonly inRun: <A, R = never>(
    run: Run | undefined,
    effect: Effect.Effect<A, DatabaseError, R>
  ) => Effect.Effect<A, never, R>
  /** The run of the calling workflow instance, if this process is running it. */
  readonly currentRun: Effect.Effect<Run | undefined>
  /** A call of the contract (which cannot fail), from inside a run or from outside. */
  readonly guarded: <A>(effect: Effect.Effect<A, DatabaseError>) => Effect.Effect<A>
  readonly inCallerTransaction: Effect.Effect<boolean>
  /**
   * A step's recorded result: from the run's journal when it holds it, else from its row. The
   * fallback read is what keeps a deferred completed after the run's journal was read (even
   * while its begin waited on the row's lock) from being missed: keep it for deferreds.
   */
  readonly readStep: (
    run: Run | undefined,
    workflow: string,
    executionId: string,
    kind: Store.StepKind,
    name: string,
    attempt: number
  ) => Effect.Effect<Option.Option<unknown>>
}

export interface ReplaySettings {
  /** `stop`: the run settles suspended on its divergence; `log`: it is logged and counted, and the run goes on. */
  readonly divergence: "stop" | "log"
  readonly window: Duration.Duration
}

export { journalKey, runId } from "./storeContract.js"

/** Retries of a retryable database failure in a call that cannot fail (the contract's `never`). */
const RETRY = Schedule.max([Schedule.exponential("50 millis", 2), Schedule.recurs(6)])
const retrying = <A, R>(effect: Effect.Effect<A, DatabaseError, R>) =>
  Effect.retry(effect, { schedule: RETRY, while: (error) => error.retryable })

/**
 * What the engine runs on: its store, and the outbox its runs and clocks are messages of (a
 * `SqlClient`, when there is one, gives transactional activities and the caller's transaction).
 */
export type Substrate = WorkflowStore | Outbox.Outbox | OutboxWorker.OutboxWorker

export const make = (options: {
  readonly workerId: string | undefined
  readonly metrics: typeof PgWorkflowEngine.metrics
  readonly Transactional: typeof PgWorkflowEngine.Transactional
  readonly replay: ReplaySettings
  /** Whether a `SqlClient` in context is the store's (false over the in-memory store). */
  readonly withSql: boolean
  readonly replayOnly: boolean
}): Effect.Effect<
  EngineContext,
  never,
  Substrate | Scope.Scope
> =>
  Effect.gen(function*() {
    const sql = options.withSql ? Option.getOrUndefined(yield* Effect.serviceOption(SqlClient.SqlClient)) : undefined
    const store = yield* WorkflowStore
    const engineScope = yield* Effect.scope
    const shutdown = yield* Deferred.make<void>()
    yield* Scope.addFinalizer(engineScope, Deferred.succeed(shutdown, undefined))
    const runsByInstance = new WeakMap<Scope.Scope, Run>()
    const deferredState = WorkflowEngineModule.makeDeferredState()
    const latestRuns = new Map<string, Run>()
    const preempt = (executionId: string, deferredName: string) =>
      Effect.suspend(() => {
        for (const run of latestRuns.values()) {
          if (run.executionId === executionId && run.journal.has(Store.journalKey("deferred", deferredName, 0))) {
            return Effect.void
          }
        }
        return deferredState.deferredDone(executionId, deferredName)
      })
    if (sql !== undefined) Preemption.register(sql, preempt)
    const workerId = options.workerId ?? `workflow:${process.pid}:${Math.random().toString(36).slice(2, 8)}`

    const orDie = <A, R = never>(effect: Effect.Effect<A, DatabaseError, R>) => Effect.orDie(retrying(effect))

    const inRun = <A, R = never>(
      run: Run | undefined,
      effect: Effect.Effect<A, DatabaseError, R>
    ): Effect.Effect<A, never, R> =>
      run === undefined ? orDie(effect) : retrying(effect).pipe(
        Effect.catch((error) =>
          Effect.suspend(() => {
            run.failure ??= error
            run.instance.abandoned = true
            // An interrupt as the outcome of this call (not a defect, which `CaptureDefects`
            // would make the workflow's result); it also ends an uninterruptible finalizer.
            return Effect.interrupt
          })
        )
      )

    const currentRun = Effect.map(
      Effect.serviceOption(WorkflowInstance),
      (instance) =>
        Option.isSome(instance)
          ? runsByInstance.get(instance.value.scope)
          : undefined
    )

    const guarded = <A>(effect: Effect.Effect<A, DatabaseError>): Effect.Effect<A> =>
      Effect.flatMap(currentRun, (run) => inRun(run, effect))

    const inCallerTransaction = sql === undefined
      ? Effect.succeed(false)
      : Effect.map(Effect.serviceOption(sql.transactionService), Option.isSome)

    const readStep = (
      run: Run | undefined,
      workflow: string,
      executionId: string,
      kind: Store.StepKind,
      name: string,
      attempt: number
    ) =>
      Effect.suspend(() => {
        const key = Store.journalKey(kind, name, attempt)
        if (run !== undefined && run.journal.has(key)) return Effect.succeed(Option.some(run.journal.get(key)))
        return Effect.map(inRun(run, store.step(workflow, executionId, kind, name, attempt)), (row) => {
          if (row === undefined) return Option.none<unknown>()
          run?.journal.set(key, row.result)
          return Option.some(row.result)
        })
      })

    return {
      sql,
      store,
      workerId,
      metrics: options.metrics,
      Transactional: options.Transactional,
      replay: options.replay,
      replayOnly: options.replayOnly,
      shutdown,
      engineScope,
      workflows: new Map(),
      runsByInstance,
      latestRuns,
      deferredState,
      preempt,
      orDie,
      inRun,
      currentRun,
      guarded,
      inCallerTransaction,
      readStep
    }
  })
