/**
 * What waits, and what ends a wait: a caller polls for an execution's result until it has one
 * (or the engine closes); a deferred's completion — a clock firing is one — is recorded once,
 * first write wins, and only the write that recorded it wakes the runs awaiting it.
 */
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import type * as DurableDeferred from "effect/workflow/DurableDeferred"
import type * as Workflow from "effect/workflow/Workflow"
import { WorkflowInstance } from "effect/workflow/WorkflowEngine"
import * as Codec from "./codec.js"
import type { EngineContext } from "./engineContext.js"
import * as Replay from "./replay.js"
import { recordsSettled } from "./run.js"

/** How a caller waiting for a result polls while the execution is pending or running. */
const WAIT = Schedule.min([Schedule.exponential("10 millis", 1.5), Schedule.spaced("500 millis")])

export const resultOf = (ctx: EngineContext, workflow: Workflow.Any, executionId: string) =>
  Effect.flatMap(
    ctx.orDie(ctx.store.read(workflow._tag, executionId)),
    (row) =>
      row === undefined || (row.status !== "complete" && row.status !== "suspended")
        ? Effect.succeed(Option.none<Workflow.Result<unknown, unknown>>())
        : Effect.map(Codec.decodeWorkflowResult(workflow, row.result), Option.some)
  )

/** Waits, polling, for a result that satisfies `done`. */
export const waitFor = (
  ctx: EngineContext,
  workflow: Workflow.Any,
  executionId: string,
  done: (result: Workflow.Result<unknown, unknown>) => boolean
) =>
  Effect.repeat(resultOf(ctx, workflow, executionId), {
    schedule: WAIT,
    until: (result) => Option.isSome(result) && done(result.value)
  }).pipe(
    Effect.map((result) => Option.getOrThrow(result)),
    Effect.raceFirst(Effect.andThen(Deferred.await(ctx.shutdown), Effect.interrupt))
  )

export const deferredDone = (ctx: EngineContext, options: {
  readonly workflowName: string
  readonly executionId: string
  readonly deferredName: string
  readonly exit: Exit.Exit<unknown, unknown>
}) =>
  Effect.gen(function*() {
    const encoded = yield* Codec.encodeExit(options.exit)
    if (options.deferredName.startsWith(Replay.RACE_PREFIX)) {
      // A race's winner: after the records of its losing arms still under way (`run.ts`).
      const run = yield* ctx.currentRun
      if (run !== undefined) yield* recordsSettled(run)
    }
    const recorded = yield* ctx.guarded(
      ctx.store.recordStep(options.workflowName, options.executionId, "deferred", options.deferredName, 0, encoded)
    )
    if (!recorded.inserted) return
    const wake = ctx.preempt(options.executionId, options.deferredName)
    const own = yield* Effect.serviceOption(WorkflowInstance)
    // A workflow's own finalizer cannot wait for its own run's cleanup. (A run completing
    // its own deferred is preempted by this wake while it still awaits it, as in
    // `layerMemory`; where the run's next writes take round trips the wake can land before
    // they are done, and the run replays: docs/workflows.md, "A run that completes its own
    // deferred".)
    yield* Option.isSome(own) && own.value.executionId === options.executionId
      ? Effect.asVoid(Effect.forkIn(wake, ctx.engineScope))
      : wake
  })

/** A clock's message: complete its deferred with void. */
export const fireClock = (ctx: EngineContext, workflowName: string, message: OutboxWorker.OutboxMessage) => {
  const { deferredName, executionId } = message.payload as { executionId: string; deferredName: string }
  return deferredDone(ctx, { workflowName, executionId, deferredName, exit: Exit.void })
}

/** A deferred's recorded completion, as the awaiting run sees it. */
export const deferredResult = (ctx: EngineContext, deferred: DurableDeferred.Any) =>
  Effect.gen(function*() {
    const instance = yield* WorkflowInstance
    const run = yield* ctx.currentRun
    const stored = yield* ctx.readStep(
      run,
      instance.workflow._tag,
      instance.executionId,
      "deferred",
      deferred.name,
      0
    )
    if (Option.isNone(stored)) return Option.none()
    const exit = yield* Codec.decodeExit(stored.value)
    if (run !== undefined) {
      Replay.deferredRead(run.replay, deferred.name)
      if (Exit.isFailure(exit)) Replay.failureReplayed(run.replay)
    }
    return Option.some(exit)
  })
