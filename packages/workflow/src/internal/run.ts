/**
 * One run of an execution, the delivery of its run message: the workflow replays its journal in
 * a fiber of its own, and what it became is settled only while the message's claim holds. A run
 * abandoned on a database failure, or one that lost its lease, settles nothing: it replays.
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import { printable } from "@effect-durable/core/Printable"
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Scope from "effect/Scope"
import * as Workflow from "effect/workflow/Workflow"
import { WorkflowEngine, WorkflowInstance } from "effect/workflow/WorkflowEngine"
import * as Codec from "./codec.js"
import type { EngineContext, Registration } from "./engineContext.js"
import { journalKey, runId } from "./engineContext.js"
import * as Patches from "./patches.js"
import * as Replay from "./replay.js"
import type * as Store from "./store.js"

/** What this process knows of a run it is running. */
export interface Run {
  readonly workflow: Workflow.Any
  readonly executionId: string
  readonly instance: WorkflowInstance["Service"]
  /** Journal rows read when the run began, by `<kind>/<name>/<attempt>`. */
  readonly journal: Map<string, unknown>
  /** An interrupt is pending: the replay only rebuilds compensations, it starts no new activity. */
  interruptPending: boolean
  interruptUnsafe: boolean
  readonly activitiesAsked: Set<string>
  /** The journal's activities this run has not asked for again, and whether it diverged. */
  readonly replay: Replay.Replay
  /**
   * Activity records under way (each done when its statement settled): a race's winner is
   * recorded only after them, so a losing arm's record never lands after the winner's
   * (`wait.ts`), which replay counts as reached (`replay.ts`).
   */
  readonly recording: Set<Deferred.Deferred<void>>
  /** The version the execution's runs are pinned to: the children it starts are pinned to it too. */
  readonly pinnedTo: string | null
  /** Children this run found not complete (it suspends until they are). */
  readonly childrenAwaited: Array<{ readonly workflow: string; readonly executionId: string }>
  fiber: Fiber.Fiber<unknown, unknown> | undefined
  /** The database failure that abandoned the run. */
  failure: DatabaseError | undefined
}

/** One run of an execution: the delivery of its run message. */
export const runExecution = (
  ctx: EngineContext,
  engine: WorkflowEngine["Service"],
  entry: Registration,
  message: OutboxWorker.OutboxMessage
) =>
  Effect.gen(function*() {
    const { deferredState, latestRuns, metrics, runsByInstance, store } = ctx
    const { workflow } = entry
    const executionId = (message.payload as { executionId: string }).executionId
    const begun = yield* store.beginRun(workflow._tag, executionId)
    // Complete (a wake that arrived after the end) or unknown: nothing to run.
    if (begun === undefined) return
    const journal = new Map<string, unknown>()
    for (const step of begun.steps) {
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
      recording: new Set(),
      pinnedTo: begun.row.pinned_to,
      replay: Replay.make(begun.steps, (step) => journalKey(step.kind, step.name, step.attempt)),
      childrenAwaited: [],
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
      Effect.provideService(Patches.Patches, Patches.forRun(ctx, run)),
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
    // runs again at once. The wake sequence cannot be relied on here: the completion may
    // have been recorded before this run began (a wake reaching a run between its await's
    // registration and its read), and without a run of its own the execution would stay
    // suspended with nothing to wake it. (A run that has read the completion is never
    // preempted by it: `EngineContext.preempt`.)
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
    const result = yield* divergedAtEnd(ctx, run, exit.value)
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
      rerun: preempted,
      waits: result._tag !== "Suspended"
        ? []
        : run.replay.diverged !== undefined
        ? [run.replay.diverged]
        : result.failed === true
        ? [{ kind: "resume" }]
        : waitsOf(run)
    })
    yield* Metric.update(
      Metric.withAttributes(metrics.runs, {
        outcome: settled.fenced ? (settled.status ?? "gone") : "fenced-out"
      }),
      1
    )
    if (!settled.fenced) {
      yield* Effect.logWarning(
        `effect-durable workflow ${printable(workflow._tag)} ${
          printable(executionId)
        }: the run lost its lease before it settled; nothing written, the next run replays`
      )
      // Not a success: the projector must not mark a message whose run settled nothing (its
      // release is refused when another worker holds it, and retries it when none does).
      return yield* Publisher.retryable("the run lost its lease before it settled")
    }
  }).pipe(
    Effect.catchTag("DatabaseError", (error) => Effect.fail(Publisher.retryable(`workflow run: ${error.message}`))),
    Effect.withSpan("WorkflowEngine.run", { attributes: { workflow: entry.workflow._tag } })
  )

/**
 * An activity's record, as one step of the run: uninterruptible once asked (a race's losing arm,
 * interrupted as the winner returns, cannot leave it running on its own) and known to the run
 * while under way.
 */
export const recording = <A, E, R>(run: Run | undefined, record: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  run === undefined ? record : Effect.uninterruptible(Effect.suspend(() => {
    const settled = Deferred.makeUnsafe<void>()
    run.recording.add(settled)
    return Effect.ensuring(
      record,
      Effect.sync(() => {
        run.recording.delete(settled)
        Deferred.doneUnsafe(settled, Effect.void)
      })
    )
  }))

/** Waits for the run's activity records under way (before a race's winner is recorded). */
export const recordsSettled = (run: Run): Effect.Effect<void> =>
  Effect.forEach([...run.recording], Deferred.await, { discard: true })

/**
 * What the run settles as: a run that diverged is suspended on it (`failed`: only an operator's
 * resume wakes it); a completion that left recorded activities unreached diverged at its end.
 */
const divergedAtEnd = (ctx: EngineContext, run: Run, result: Workflow.Result<unknown, unknown>) =>
  Effect.gen(function*() {
    if (
      run.replay.diverged === undefined && result._tag === "Complete" && !run.interruptPending &&
      run.replay.unreached.size > 0
    ) {
      const unreached = Replay.unreachedAtEnd(run.replay)
      yield* Metric.update(Metric.withAttributes(ctx.metrics.divergences, { workflow: run.workflow._tag }), 1)
      yield* Effect.logWarning(
        `effect-durable workflow ${printable(run.workflow._tag)} ${
          printable(run.executionId)
        }: the run ended where the journal holds ${unreached.map(printable).join(", ")}, not asked for again: ${
          ctx.replay.divergence === "stop" ? "it stops, diverged, for an operator" : "it completes (divergence: log)"
        }`
      )
      if (ctx.replay.divergence === "stop") run.replay.diverged = { kind: "diverged", step: "the run's end", unreached }
    }
    return run.replay.diverged === undefined ? result : new Workflow.Suspended({ failed: true })
  })

/** The prefix upstream's `DurableClock.sleep` names its clock's deferred with. */
const CLOCK_DEFERRED = "DurableClock/"

/**
 * What a suspended run waits on: the deferreds it awaits that its journal has no result for
 * (a clock is the deferred `DurableClock/<name>`) and the children it found not complete.
 */
const waitsOf = (run: Run): ReadonlyArray<Store.WaitingOn> => [
  ...[...run.instance.awaitedDeferreds.keys()]
    .filter((name) => !run.journal.has(journalKey("deferred", name, 0)))
    .map((name): Store.WaitingOn =>
      name.startsWith(CLOCK_DEFERRED)
        ? { kind: "clock", name: name.slice(CLOCK_DEFERRED.length) }
        : { kind: "deferred", name }
    ),
  ...run.childrenAwaited.map((child): Store.WaitingOn => ({ kind: "child", ...child }))
]
