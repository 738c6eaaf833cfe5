/**
 * A `WorkflowEngine` for `effect/workflow` on the substrate's PostgreSQL: executions and
 * their step journal in two tables (migration 13), each run the delivery of an outbox message.
 *
 * - **One run of an execution at a time**: its run messages share one ordering key, and the
 *   outbox delivers a key's messages one after another.
 * - **No lost wake-up**: a deferred done, a clock firing, a child completing or an interrupt
 *   bumps the execution's wake sequence in the transaction that records it; a suspended
 *   execution gets a run message there and then, a running one settles pending (and gets its
 *   next run) when its wake sequence moved while it ran.
 * - **Fenced**: a run settles only while its message's claim holds (same worker, same
 *   generation, lease alive), checked under lock in the settle's transaction; a runner that
 *   lost its lease writes nothing and the execution's next run replays.
 * - **Durable starts and signals in the caller's transaction**: `execute` with `discard`
 *   and `DurableDeferred.done` inside `sql.withTransaction` commit with the caller's writes
 *   or not at all.
 * - **Clocks on the database clock**: a clock is a delayed outbox message.
 * - A database failure inside a run abandons the run (it is retried as a replay: nothing is
 *   recorded as the workflow's outcome); activities are at least once, memoized by (name,
 *   attempt) once their result is recorded.
 *
 * Where upstream's engines differ or are silent, this one follows `WorkflowEngine.layerMemory`
 * (see docs/workflows.md for each choice).
 *
 * @since 0.2.0
 */
import { DatabaseError } from "@effect-durable/core/Errors"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import { classify } from "@effect-durable/pg/ErrorClassification"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as SqlClient from "effect/sql/SqlClient"
import { SqlError } from "effect/sql/SqlError"
import type * as Activity from "effect/workflow/Activity"
import * as Workflow from "effect/workflow/Workflow"
import { WorkflowEngine, WorkflowInstance } from "effect/workflow/WorkflowEngine"
import * as WorkflowEngineModule from "effect/workflow/WorkflowEngine"
import * as Codec from "./internal/codec.js"
import * as Preemption from "./internal/preemption.js"
import * as Store from "./internal/store.js"

export interface PgWorkflowEngineOptions {
  /**
   * Refuse (as a defect of the caller's `execute`) a start of an existing execution id with
   * another payload. Default false: as upstream, the first payload stands; the mismatch is
   * counted on the execution, logged and counted in `effect_durable_workflow_payload_mismatches`.
   */
  readonly strictPayloads?: boolean
  /** The run projectors' lease. Default 30 seconds. */
  readonly lease?: Duration.Input
  /** How long one run may take (its activities included). Default 1 hour, at most 1 day. */
  readonly runTimeout?: Duration.Input
  /**
   * How long shutting down waits for runs under way before it cuts them (a cut run is
   * abandoned: its execution replays in the next process). Default 10 seconds.
   */
  readonly shutdownDeadline?: Duration.Input
  /** Runs of one workflow at once in this process. Default 16. */
  readonly concurrency?: number
  /** How often the run projectors poll when no NOTIFY arrives. Default 1 second. */
  readonly pollInterval?: Duration.Input
  /**
   * The worker id the run projectors claim under (shown with each claim in `status`). The
   * projectors of all workflows in this process share it: they claim disjoint topics. Default
   * `workflow:<pid>:<random>`, new in every process.
   */
  readonly workerId?: string
  /**
   * False: this process starts, signals, polls and interrupts executions of the workflows it
   * registers but runs none (no projector; a web tier beside the runners). Default true.
   */
  readonly runs?: boolean
  /**
   * Behind a transaction pooler (PgBouncer), a direct URL for the run projectors' LISTEN
   * connection (the pool cannot carry it), as `Projector.layer`'s `listenUrl`.
   */
  readonly listenUrl?: Redacted.Redacted<string>
}

/** A second start of an execution id with another payload, refused in strict mode. */
export class PayloadMismatch extends Schema.TaggedError<PayloadMismatch>("@effect-durable/workflow/PayloadMismatch")(
  "PayloadMismatch",
  { workflow: Schema.String, executionId: Schema.String }
) {
  override get message() {
    return `workflow ${this.workflow} execution ${this.executionId} was started before with another payload (strict mode refuses it)`
  }
}

/**
 * Marks an activity transactional: its SQL (through the `SqlClient` it uses) runs in one
 * transaction with its journal row, so a database-only step is applied exactly once — a crash
 * or a cut run rolls both back, and two runs racing on it apply it once (the second waits for
 * the first's commit and takes its result). Keep such an activity short and free of calls to
 * other systems: it holds a connection and its journal row's lock while it runs. An activity
 * that fails is recorded as failed with its writes rolled back (a savepoint).
 *
 * @since 0.2.0
 */
export const Transactional = Context.Reference<boolean>("@effect-durable/workflow/Transactional", {
  defaultValue: () => false
})

/**
 * `Activity.make({ ... }).pipe(PgWorkflowEngine.transactional)`: the activity, transactional.
 *
 * @since 0.2.0
 */
export const transactional = <A extends Activity.Activity<any, any, any>>(activity: A): A =>
  activity.annotate(Transactional, true) as A

export const metrics = {
  runs: Metric.counter("effect_durable_workflow_runs", { description: "workflow runs, by outcome" }),
  payloadMismatches: Metric.counter("effect_durable_workflow_payload_mismatches", {
    description: "starts of an existing execution with another payload"
  }),
  repeatedActivities: Metric.counter("effect_durable_workflow_repeated_activities", {
    description: "the same activity (name, attempt) asked twice within one run: a reused or renamed activity name"
  }),
  activities: Metric.counter("effect_durable_workflow_activities", {
    description: "activity executions (not replays), by workflow, activity and outcome"
  }),
  activityDuration: Metric.timer("effect_durable_workflow_activity_duration", {
    description: "how long activity executions take, by workflow and activity"
  })
}

/** What this process knows of a run it is running. */
interface Run {
  readonly workflow: Workflow.Any
  readonly executionId: string
  readonly instance: WorkflowInstance["Service"]
  /** Journal rows read when the run began, by `<kind>/<name>/<attempt>`. */
  readonly journal: Map<string, unknown>
  /** An interrupt is pending: the replay only rebuilds compensations, it starts no new activity. */
  interruptPending: boolean
  interruptUnsafe: boolean
  readonly activitiesAsked: Set<string>
  fiber: Fiber.Fiber<unknown, unknown> | undefined
  /** The database failure that abandoned the run. */
  failure: DatabaseError | undefined
}

/**
 * A retryable database failure (a lost connection, a serialization failure, a deadlock, a
 * lock timeout) in what a transactional activity's body became, as a failure or a defect: its
 * transaction is lost or refused, so it is not the activity's result. The step rolls back and
 * is retried (then the run is abandoned and replays); other failures are the activity's own.
 */
const retryableDatabaseFailure = (result: Workflow.Result<unknown, unknown>): DatabaseError | undefined => {
  if (result._tag !== "Complete" || Exit.isSuccess(result.exit)) return undefined
  for (const reason of result.exit.cause.reasons) {
    const value = Cause.isFailReason(reason) ? reason.error : Cause.isDieReason(reason) ? reason.defect : undefined
    const error = value instanceof SqlError
      ? classify("WorkflowEngine.transactionalActivity")(value)
      : value instanceof DatabaseError
      ? value
      : undefined
    if (error?.retryable === true) return error
  }
  return undefined
}

const journalKey = (kind: Store.StepKind, name: string, attempt: number) => `${kind}/${name}/${attempt}`
const runId = (workflow: string, executionId: string) => `${workflow}\u0000${executionId}`

/** Retries of a retryable database failure in a call that cannot fail (the contract's `never`). */
const RETRY = Schedule.max([Schedule.exponential("50 millis", 2), Schedule.recurs(6)])
const retrying = <A, R>(effect: Effect.Effect<A, DatabaseError, R>) =>
  Effect.retry(effect, { schedule: RETRY, while: (error) => error.retryable })

/** How a caller waiting for a result polls while the execution is pending or running. */
const WAIT = Schedule.min([Schedule.exponential("10 millis", 1.5), Schedule.spaced("500 millis")])

export const make = (
  options: PgWorkflowEngineOptions = {}
): Effect.Effect<
  WorkflowEngine["Service"],
  never,
  SqlClient.SqlClient | DurableSettings | Outbox.Outbox | OutboxWorker.OutboxWorker | Scope.Scope
> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const outbox = yield* Outbox.Outbox
    const substrate = yield* Effect.context<
      SqlClient.SqlClient | DurableSettings | Outbox.Outbox | OutboxWorker.OutboxWorker
    >()
    const engineScope = yield* Effect.scope
    // Closed with the engine: callers still waiting for a result are interrupted then, as
    // upstream's engines interrupt them (the execution itself goes on in another process).
    const shutdown = yield* Deferred.make<void>()
    yield* Scope.addFinalizer(engineScope, Deferred.succeed(shutdown, undefined))
    const store = Store.make(sql, settings, outbox)
    const workflows = new Map<string, {
      readonly workflow: Workflow.Any
      readonly execute: (
        payload: object,
        executionId: string
      ) => Effect.Effect<unknown, unknown, WorkflowInstance | WorkflowEngine>
    }>()
    // By the run's instance, through its scope (upstream's durable races run their branches on
    // copies of the instance, `{ ...instance }`, which share its scope): two runs of one
    // execution in this process (a stalled one and its replay) never share a journal. By
    // execution: the latest, for `interruptUnsafe`.
    const runsByInstance = new WeakMap<Scope.Scope, Run>()
    const latestRuns = new Map<string, Run>()
    const deferredState = WorkflowEngineModule.makeDeferredState()
    Preemption.register(sql, deferredState.deferredDone)
    const workerId = options.workerId ?? `workflow:${process.pid}:${Math.random().toString(36).slice(2, 8)}`

    /** A call that cannot fail: retryable failures retried, the rest a defect. */
    const orDie = <A, R = never>(effect: Effect.Effect<A, DatabaseError, R>) => Effect.orDie(retrying(effect))

    /**
     * Inside a run, a database failure must not become the workflow's outcome (a captured
     * defect would complete it): the run is abandoned — interrupted, its durable finalizers
     * skipped — and its message retried, so the execution replays.
     */
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

    /** A call of the contract (which cannot fail), from inside a run or from outside. */
    const guarded = <A>(effect: Effect.Effect<A, DatabaseError>): Effect.Effect<A> =>
      Effect.flatMap(currentRun, (run) => inRun(run, effect))

    const inCallerTransaction = Effect.map(Effect.serviceOption(sql.transactionService), Option.isSome)

    const readStep = (
      run: Run | undefined,
      workflow: string,
      executionId: string,
      kind: Store.StepKind,
      name: string,
      attempt: number
    ) =>
      Effect.suspend(() => {
        const key = journalKey(kind, name, attempt)
        if (run !== undefined && run.journal.has(key)) return Effect.succeed(Option.some(run.journal.get(key)))
        return Effect.map(inRun(run, store.step(workflow, executionId, kind, name, attempt)), (row) => {
          if (row === undefined) return Option.none<unknown>()
          run?.journal.set(key, row.result)
          return Option.some(row.result)
        })
      })

    /** One run of an execution: the delivery of its run message. */
    const runExecution = (entry: NonNullable<ReturnType<typeof workflows.get>>, message: OutboxWorker.OutboxMessage) =>
      Effect.gen(function*() {
        const { workflow } = entry
        const executionId = (message.payload as { executionId: string }).executionId
        const begun = yield* store.beginRun(workflow._tag, executionId)
        // Complete (a wake that arrived after the end) or unknown: nothing to run.
        if (begun === undefined) return
        const journal = new Map<string, unknown>()
        for (const step of yield* store.steps(workflow._tag, executionId)) {
          journal.set(journalKey(step.kind, step.name, step.attempt), step.result)
        }
        const payload = yield* Codec.decodePayload(workflow, begun.row.payload)
        const instance = WorkflowInstance.initial(workflow, executionId)
        const run: Run = {
          workflow,
          executionId,
          instance,
          journal,
          interruptPending: begun.row.interrupt_requested,
          interruptUnsafe: begun.row.interrupt_unsafe,
          activitiesAsked: new Set(),
          fiber: undefined,
          failure: undefined
        }
        const id = runId(workflow._tag, executionId)
        runsByInstance.set(instance.scope, run)
        latestRuns.set(id, run)
        const pipeline = entry.execute(payload, executionId).pipe(
          Effect.onExit((exit) =>
            Effect.gen(function*() {
              // A safe interrupt takes effect where the run would suspend; an unsafe one on
              // any ending. An interrupt asked during this run is read again here.
              if (!run.interruptPending && instance.suspended && !instance.abandoned) {
                const row = yield* Effect.orElseSucceed(store.read(workflow._tag, executionId), () => undefined)
                if (row?.interrupt_requested === true) {
                  run.interruptPending = true
                  run.interruptUnsafe = row.interrupt_unsafe
                }
              }
              if (
                !run.interruptPending ||
                (!run.interruptUnsafe && !instance.suspended && !instance.abandoned &&
                  !(Context.get(workflow.annotations, Workflow.SuspendOnFailure) && Exit.isFailure(exit)))
              ) {
                return
              }
              instance.interrupted = true
              instance.suspended = false
              yield* Effect.withFiber((fiber) => Effect.interruptible(Fiber.interrupt(fiber)))
            })
          ),
          Workflow.intoResult,
          Effect.provideService(WorkflowEngine, engine),
          (effect) => deferredState.trackRun(instance, effect)
        )
        // The run in a fiber of its own, as upstream's engines run it: a preemption (a
        // deferred this run waits on completed) or an unsafe interrupt interrupts that fiber,
        // not this delivery, which goes on to settle what the run became.
        const fiber = yield* Effect.forkChild(pipeline, { startImmediately: true })
        run.fiber = fiber
        const awaited = yield* Fiber.await(fiber).pipe(
          Effect.onInterrupt(() =>
            Effect.suspend(() => {
              // This delivery is cut (shutdown, the run timeout): the run is abandoned, its
              // durable finalizers (compensations) skipped — another run replays it.
              instance.abandoned = true
              return Fiber.interrupt(fiber)
            })
          ),
          Effect.ensuring(Effect.sync(() => {
            if (latestRuns.get(id) === run) latestRuns.delete(id)
          }))
        )
        // Preempted by a completed deferred: a suspension (as `layerMemory` reads it) that
        // runs again at once. The completion's wake may predate this run (it was recorded
        // before the run began, and its in-process wake came late, to a run that had already
        // read it but still holds it awaited), so the wake sequence cannot be relied on here:
        // without a run of its own the execution would stay suspended with nothing to wake it.
        const preempted = Exit.isFailure(awaited) && Cause.hasInterruptsOnly(awaited.cause) && instance.suspended &&
          !instance.abandoned
        const exit: Exit.Exit<Workflow.Result<unknown, unknown>, unknown> = preempted
          ? Exit.succeed(new Workflow.Suspended({}))
          : awaited
        if (run.failure !== undefined) {
          yield* Metric.update(Metric.withAttributes(metrics.runs, { outcome: "abandoned" }), 1)
          return yield* Publisher.retryable(`run abandoned: ${run.failure.message}`)
        }
        if (Exit.isFailure(exit)) {
          // An unsafe interrupt cut the run: no outcome; the replay applies the interrupt. A
          // defect with `CaptureDefects` off: retried, then a dead letter an operator sees.
          yield* Metric.update(Metric.withAttributes(metrics.runs, { outcome: "interrupted" }), 1)
          return yield* Publisher.retryable(
            Cause.hasInterruptsOnly(exit.cause)
              ? "run interrupted; it replays"
              : `run failed: ${Cause.pretty(exit.cause)}`
          )
        }
        const result = exit.value
        if (result._tag === "Suspended") {
          // This run's scope: its finalizers belong to a superseded run (the replay builds its
          // own), so they are released without running (`abandoned`).
          instance.abandoned = true
          yield* Scope.close(instance.scope, Exit.void)
        }
        const settled = yield* store.settle({
          workflow: workflow._tag,
          executionId,
          claim: message.claim,
          wakeSeq: begun.wakeSeq,
          result: yield* Codec.encodeWorkflowResult(workflow, result),
          complete: result._tag === "Complete",
          failed: result._tag === "Suspended" && result.failed === true,
          rerun: preempted
        })
        yield* Metric.update(
          Metric.withAttributes(metrics.runs, {
            outcome: settled.fenced ? (settled.status ?? "gone") : "fenced-out"
          }),
          1
        )
        if (!settled.fenced) {
          yield* Effect.logWarning(
            `effect-durable workflow ${workflow._tag} ${executionId}: the run lost its lease before it settled; nothing written, the next run replays`
          )
          // Not a success: the projector must not mark a message whose run settled nothing (its
          // release is refused when another worker holds it, and retries it when none does).
          return yield* Publisher.retryable("the run lost its lease before it settled")
        }
      }).pipe(
        Effect.catchTag("DatabaseError", (error) => Effect.fail(Publisher.retryable(`workflow run: ${error.message}`))),
        Effect.withSpan("WorkflowEngine.run", { attributes: { workflow: entry.workflow._tag } })
      )

    /** A clock's message: complete its deferred with void. */
    const fireClock = (workflowName: string, message: OutboxWorker.OutboxMessage) => {
      const { deferredName, executionId } = message.payload as { executionId: string; deferredName: string }
      return deferredDone({ workflowName, executionId, deferredName, exit: Exit.void })
    }

    const deferredDone = (options: {
      readonly workflowName: string
      readonly executionId: string
      readonly deferredName: string
      readonly exit: Exit.Exit<unknown, unknown>
    }) =>
      Effect.gen(function*() {
        const encoded = yield* Codec.encodeExit(options.exit)
        const recorded = yield* guarded(
          store.recordStep(options.workflowName, options.executionId, "deferred", options.deferredName, 0, encoded)
        )
        if (!recorded.inserted) return
        const wake = deferredState.deferredDone(options.executionId, options.deferredName)
        const own = yield* Effect.serviceOption(WorkflowInstance)
        // A workflow's own finalizer cannot wait for its own run's cleanup. (A run completing
        // its own deferred is preempted by this wake while it still awaits it, as in
        // `layerMemory`; where the run's next writes take round trips the wake can land before
        // they are done, and the run replays: docs/workflows.md, "A run that completes its own
        // deferred".)
        yield* Option.isSome(own) && own.value.executionId === options.executionId
          ? Effect.asVoid(Effect.forkIn(wake, engineScope))
          : wake
      })

    const resultOf = (workflow: Workflow.Any, executionId: string) =>
      Effect.flatMap(orDie(store.read(workflow._tag, executionId)), (row) =>
        row === undefined || (row.status !== "complete" && row.status !== "suspended")
          ? Effect.succeed(Option.none<Workflow.Result<unknown, unknown>>())
          : Effect.map(Codec.decodeWorkflowResult(workflow, row.result), Option.some))

    /** Waits, polling, for a result that satisfies `done`. */
    const waitFor = (
      workflow: Workflow.Any,
      executionId: string,
      done: (result: Workflow.Result<unknown, unknown>) => boolean
    ) =>
      Effect.repeat(resultOf(workflow, executionId), {
        schedule: WAIT,
        until: (result) =>
          Option.isSome(result) && done(result.value)
      }).pipe(
        Effect.map((result) =>
          Option.getOrThrow(result)
        ),
        Effect.raceFirst(Effect.andThen(Deferred.await(shutdown), Effect.interrupt))
      )

    const engine: WorkflowEngine["Service"] = WorkflowEngineModule.makeUnsafe({
      register: (workflow, execute) =>
        Effect.gen(function*() {
          const existing = workflows.get(workflow._tag)
          if (existing !== undefined) {
            // One definition (and one projector) per name: the same one again is a no-op;
            // another one is ignored with a warning, as the cluster engine does.
            if (existing.workflow !== workflow) {
              yield* Effect.logWarning(
                `effect-durable workflow ${workflow._tag}: already registered with payload shape ${
                  Codec.payloadShape(existing.workflow)
                }; ignoring another definition with payload shape ${Codec.payloadShape(workflow)}`
              )
            }
            return
          }
          const entry = { workflow, execute }
          workflows.set(workflow._tag, entry)
          if (options.runs === false) return
          const runs = Store.runTopic(workflow._tag)
          const publisher = Publisher.layerHandler((message: OutboxWorker.OutboxMessage) =>
            message.topic === runs ? runExecution(entry, message) : fireClock(workflow._tag, message)
          )
          yield* Layer.build(
            Projector.layer({
              topics: [runs, Store.clockTopic(workflow._tag)],
              workerId,
              batchSize: 16,
              concurrency: options.concurrency ?? 16,
              lease: options.lease ?? "30 seconds",
              pollInterval: options.pollInterval ?? "1 second",
              deliveryTimeout: options.runTimeout ?? "1 hour",
              ...(options.shutdownDeadline === undefined ? {} : { shutdownDeadline: options.shutdownDeadline }),
              backoff: { min: "100 millis", max: "30 seconds" },
              ...(options.listenUrl === undefined ? {} : { listenUrl: options.listenUrl })
            }).pipe(Layer.provide(publisher), Layer.provide(Layer.succeedContext(substrate)))
          ).pipe(Effect.orDie)
        }),
      execute: (workflow, opts) =>
        Effect.gen(function*() {
          if (!workflows.has(workflow._tag)) {
            return yield* Effect.die(`Workflow ${workflow._tag} is not registered`)
          }
          const payload = yield* Codec.encodePayload(workflow, opts.payload)
          const parent = opts.parent !== undefined && opts.detached !== true
            ? { workflow: opts.parent.workflow._tag, executionId: opts.parent.executionId }
            : undefined
          const started = yield* guarded(
            store.start({ workflow: workflow._tag, executionId: opts.executionId, payload, parent })
          )
          if (started.mismatch) {
            yield* Metric.update(metrics.payloadMismatches, 1)
            if (options.strictPayloads === true) {
              return yield* Effect.die(new PayloadMismatch({ workflow: workflow._tag, executionId: opts.executionId }))
            }
            yield* Effect.logWarning(
              `effect-durable workflow ${workflow._tag} ${opts.executionId}: started again with another payload; the first one stands`
            )
          }
          if (opts.discard) return undefined as never
          if (opts.parent !== undefined) {
            // A child, from inside its parent's run: its result if it has one, else the parent
            // suspends (the child's completion wakes it). Never a wait: parents holding their
            // runs while their children queue behind them for the same projector could deadlock.
            const current = yield* guarded(store.read(workflow._tag, opts.executionId))
            return (current === undefined || current.status === "pending" || current.status === "running"
              ? new Workflow.Suspended({})
              : yield* Codec.decodeWorkflowResult(workflow, current.result)) as never
          }
          if (yield* inCallerTransaction) {
            return yield* Effect.die(
              `${workflow._tag}.execute inside a transaction can only start it (discard: true): its run cannot begin before the transaction commits`
            )
          }
          return (yield* waitFor(workflow, opts.executionId, () => true)) as never
        }),
      awaitComplete: (workflow, executionId) =>
        Effect.asVoid(waitFor(workflow, executionId, (result) => result._tag === "Complete")),
      poll: resultOf,
      interrupt: (workflow, executionId) =>
        Effect.asVoid(guarded(store.requestInterrupt(workflow._tag, executionId, false))),
      interruptUnsafe: (workflow, executionId) =>
        Effect.gen(function*() {
          yield* guarded(store.requestInterrupt(workflow._tag, executionId, true))
          const run = latestRuns.get(runId(workflow._tag, executionId))
          if (run?.fiber !== undefined) {
            // Cut now; its finalizers are skipped: the replay runs the compensations, once.
            run.instance.abandoned = true
            yield* Fiber.interrupt(run.fiber)
          }
        }),
      resume: (workflow, executionId) => guarded(store.wake(workflow._tag, executionId, "explicit")),
      activityExecute: (activity: Activity.Any, attempt: number) =>
        Effect.gen(function*() {
          const instance = yield* WorkflowInstance
          const run = yield* currentRun
          const workflow = instance.workflow._tag
          const key = `${activity.name}/${attempt}`
          if (run !== undefined) {
            if (run.activitiesAsked.has(key)) {
              yield* Metric.update(metrics.repeatedActivities, 1)
              yield* Effect.logWarning(
                `effect-durable workflow ${workflow} ${instance.executionId}: activity ${activity.name} attempt ${attempt} asked twice in one run — a reused name returns the first call's result`
              )
            }
            run.activitiesAsked.add(key)
          }
          const stored = yield* readStep(run, workflow, instance.executionId, "activity", activity.name, attempt)
          if (Option.isSome(stored)) return yield* Codec.decodeActivityResult(stored.value)
          // An interrupt asked since the run began is seen before the next activity starts.
          if (run !== undefined && !run.interruptPending) {
            const row = yield* inRun(run, store.read(workflow, instance.executionId))
            if (row?.interrupt_requested === true) {
              run.interruptPending = true
              run.interruptUnsafe = row.interrupt_unsafe
            }
          }
          // A pending interrupt replays only to rebuild compensations: no new activity starts.
          if (run?.interruptPending === true && !instance.interrupted) return new Workflow.Suspended({})
          // Its own awaited deferreds, as `layerMemory` gives it: a deferred awaited inside an
          // activity body never preempts the run (when the activity suspends on it, the run
          // settles suspended and the completion's wake sequence wakes it).
          const activityInstance = WorkflowInstance.initial(instance.workflow, instance.executionId)
          activityInstance.interrupted = instance.interrupted
          const attributes = { workflow, activity: activity.name }
          const observed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
            Effect.timed(effect).pipe(
              Effect.flatMap(([duration, value]) =>
                Effect.as(Metric.update(Metric.withAttributes(metrics.activityDuration, attributes), duration), value)
              ),
              Effect.withSpan("WorkflowEngine.activity", {
                attributes: { ...attributes, attempt, executionId: instance.executionId }
              })
            )
          const outcome = (result: Workflow.Result<unknown, unknown>) =>
            Metric.update(
              Metric.withAttributes(metrics.activities, {
                ...attributes,
                outcome: result._tag === "Suspended"
                  ? "suspended"
                  : result.exit._tag === "Success"
                  ? "success"
                  : "failure"
              }),
              1
            )
          const execute = (wrap: (effect: Effect.Effect<any, any, any>) => Effect.Effect<any, any, any>) =>
            activity.executeEncoded.pipe(
              wrap,
              Workflow.intoResult,
              Effect.tap(outcome),
              Effect.provideService(WorkflowInstance, activityInstance)
            ) as Effect.Effect<Workflow.Result<unknown, unknown>>
          if (Context.get(activity.annotations, Transactional)) {
            // The body's SQL in a savepoint (a failed activity leaves no writes), in the
            // transaction that writes its journal row.
            const recorded = yield* inRun(
              run,
              store.transactionalStep(
                workflow,
                instance.executionId,
                activity.name,
                attempt,
                Effect.flatMap(
                  execute((effect) => sql.withTransaction(effect)),
                  (result) => {
                    if (result._tag === "Suspended") return Effect.succeed(undefined)
                    const lost = retryableDatabaseFailure(result)
                    return lost === undefined ? Codec.encodeActivityResult(result) : Effect.fail(lost)
                  }
                ).pipe(observed)
              )
            )
            if (recorded === undefined) return new Workflow.Suspended({})
            run?.journal.set(journalKey("activity", activity.name, attempt), recorded.result)
            return yield* Codec.decodeActivityResult(recorded.result)
          }
          const result = yield* observed(execute((effect) => effect))
          if (result._tag === "Suspended") return result
          const recorded = yield* inRun(
            run,
            Effect.flatMap(
              Codec.encodeActivityResult(result),
              (json) => store.recordStep(workflow, instance.executionId, "activity", activity.name, attempt, json)
            )
          )
          run?.journal.set(journalKey("activity", activity.name, attempt), recorded.result)
          // Another run of this execution (one that lost its lease) may have recorded first: its result stands.
          return recorded.inserted ? result : yield* Codec.decodeActivityResult(recorded.result)
        }),
      deferredResult: (deferred) =>
        Effect.gen(function*() {
          const instance = yield* WorkflowInstance
          const run = yield* currentRun
          const stored = yield* readStep(
            run,
            instance.workflow._tag,
            instance.executionId,
            "deferred",
            deferred.name,
            0
          )
          if (Option.isNone(stored)) return Option.none()
          return Option.some(yield* Codec.decodeExit(stored.value))
        }),
      deferredDone,
      scheduleClock: (workflow, opts) =>
        guarded(
          store.scheduleClock(
            workflow._tag,
            opts.executionId,
            opts.clock.name,
            opts.clock.deferred.name,
            opts.clock.duration
          )
        )
    })
    return engine
  })

/**
 * The engine as a layer over the substrate (`Durable.layer`): each registered workflow runs
 * its executions through a projector of its own on its two topics.
 */
export const layer = (
  options: PgWorkflowEngineOptions = {}
): Layer.Layer<
  WorkflowEngine,
  never,
  SqlClient.SqlClient | DurableSettings | Outbox.Outbox | OutboxWorker.OutboxWorker
> => Layer.effect(WorkflowEngine, make(options))
