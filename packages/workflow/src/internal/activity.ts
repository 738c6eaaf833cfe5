/**
 * Activities: at least once, memoized by (name, attempt) once their result is recorded, the
 * first record standing. A transactional one's SQL commits with its journal row, so it is
 * applied once; a run with an interrupt pending starts no new activity.
 */
import { DatabaseError } from "@effect-durable/core/Errors"
import { printable } from "@effect-durable/core/Printable"
import { classify } from "@effect-durable/pg/ErrorClassification"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import { SqlError } from "effect/sql/SqlError"
import type * as Activity from "effect/workflow/Activity"
import * as Workflow from "effect/workflow/Workflow"
import { WorkflowInstance } from "effect/workflow/WorkflowEngine"
import * as Codec from "./codec.js"
import type { EngineContext } from "./engineContext.js"
import { journalKey } from "./engineContext.js"
import * as Replay from "./replay.js"
import { recording, type Run } from "./run.js"

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

/**
 * Whether a new step stops the run: recorded activities left unreached after the replay window
 * (`replay.ts`). In `log` mode it is logged and counted, and the step runs.
 */
const diverges = (ctx: EngineContext, run: Run, name: string, attempt: number) =>
  Effect.gen(function*() {
    if (run.replay.diverged !== undefined) return true
    const unreached = yield* Replay.awaitReached(run.replay, ctx.replay.window)
    if (unreached.length === 0) return false
    // Another step of this run, waiting beside this one, said it first.
    if (run.replay.diverged !== undefined) return true
    const step = Replay.label(name, attempt)
    yield* Metric.update(Metric.withAttributes(ctx.metrics.divergences, { workflow: run.workflow._tag }), 1)
    yield* Effect.logWarning(
      `effect-durable workflow ${printable(run.workflow._tag)} ${printable(run.executionId)}: the code asked for ${
        printable(step)
      } where the journal holds ${unreached.map(printable).join(", ")}, not asked for again: ${
        ctx.replay.divergence === "stop" ? "the run stops, diverged, for an operator" : "it runs (divergence: log)"
      }`
    )
    if (ctx.replay.divergence === "log") {
      // Said once: the run goes on without waiting again.
      Replay.forgive(run.replay)
      return false
    }
    run.replay.diverged = { kind: "diverged", step, unreached }
    return true
  })

/** An activity asked by a workflow: its recorded result, or its execution, recorded. */
export const execute = (ctx: EngineContext, activity: Activity.Any, attempt: number) =>
  Effect.gen(function*() {
    const { currentRun, inRun, metrics, readStep, sql, store, Transactional } = ctx
    const instance = yield* WorkflowInstance
    const run = yield* currentRun
    const workflow = instance.workflow._tag
    const key = `${activity.name}/${attempt}`
    if (run !== undefined) {
      if (run.activitiesAsked.has(key)) {
        yield* Metric.update(metrics.repeatedActivities, 1)
        yield* Effect.logWarning(
          `effect-durable workflow ${printable(workflow)} ${printable(instance.executionId)}: activity ${
            printable(activity.name)
          } attempt ${attempt} asked twice in one run — a reused name returns the first call's result`
        )
      }
      run.activitiesAsked.add(key)
    }
    // Inside a run, the journal read when it began holds every activity recorded before it: only
    // a runner that lost its lease records one later, and the first record stands either way.
    const journaled = journalKey("activity", activity.name, attempt)
    if (run !== undefined) Replay.reached(run.replay, journaled)
    const stored = run === undefined
      ? yield* readStep(run, workflow, instance.executionId, "activity", activity.name, attempt)
      : run.journal.has(journaled)
      ? Option.some(run.journal.get(journaled))
      : Option.none()
    if (Option.isSome(stored)) {
      const replayed = yield* Codec.decodeActivityResult(stored.value)
      if (run !== undefined && replayed._tag === "Complete" && Exit.isFailure(replayed.exit)) {
        Replay.failureReplayed(run.replay)
      }
      return replayed
    }
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
    // A new step: not while the journal holds activities this run has not asked for again. (Not
    // checked while the run parks or is interrupted: compensations run with siblings cut off.)
    if (
      run !== undefined && !run.interruptPending && !instance.interrupted && !instance.suspended &&
      (yield* diverges(ctx, run, activity.name, attempt))
    ) {
      return new Workflow.Suspended({})
    }
    // A replay of a journal taken from elsewhere runs nothing: past the journal, it stops.
    if (ctx.replayOnly) return new Workflow.Suspended({})
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
    const executeBody = (wrap: (effect: Effect.Effect<any, any, any>) => Effect.Effect<any, any, any>) =>
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
            // In memory there is no SQL to hold together: the body runs as it is.
            executeBody((effect) => sql === undefined ? effect : sql.withTransaction(effect)),
            (result) => {
              if (result._tag === "Suspended") return Effect.succeed(undefined)
              const lost = retryableDatabaseFailure(result)
              return lost === undefined ? Codec.encodeActivityResult(result) : Effect.fail(lost)
            }
          ).pipe(observed)
        )
      )
      if (recorded === undefined) return new Workflow.Suspended({})
      run?.journal.set(journaled, recorded.result)
      return yield* Codec.decodeActivityResult(recorded.result)
    }
    const result = yield* observed(executeBody((effect) => effect))
    if (result._tag === "Suspended") return result
    const recorded = yield* recording(
      run,
      inRun(
        run,
        Effect.flatMap(
          Codec.encodeActivityResult(result),
          (json) => store.recordStep(workflow, instance.executionId, "activity", activity.name, attempt, json)
        )
      )
    )
    run?.journal.set(journaled, recorded.result)
    // Another run of this execution (one that lost its lease) may have recorded first: its result stands.
    return recorded.inserted ? result : yield* Codec.decodeActivityResult(recorded.result)
  })
