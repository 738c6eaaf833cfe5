/**
 * The process's one run projector, over the topics of every workflow registered here (asked at
 * each claim), so its connections (a LISTEN and a lease keeper) do not grow with the number of
 * workflows. Started by the first registration, in the engine's scope.
 *
 * Each registration joins it in the scope that registered the workflow, and keeps what that
 * scope gave it: its runs and clocks run with the registering context (a service provided to
 * one workflow's layer only is there for its runs, as with a projector of its own). Closing that
 * scope takes its topics out, then waits for its runs under way up to the shutdown deadline
 * (counted once from the first registration that closes) and cuts what is left as abandoned
 * (it replays in the next process), so no run of it outlives the services it was given.
 */
import { printable } from "@effect-durable/core/Printable"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import type { WorkflowEngine } from "effect/workflow/WorkflowEngine"
import type { PgWorkflowEngineOptions } from "../PgWorkflowEngine.js"
import type { EngineContext, Registration, Substrate as EngineSubstrate } from "./engineContext.js"
import * as Run from "./run.js"
import * as Store from "./storeContract.js"
import * as Wait from "./wait.js"

/** Runs the projector claims at once. */
const RUN_BATCH = 16
/** Claims take at most so many topics: two or three per workflow (runs, pinned runs, clocks). */
const MAX_TOPICS = 1000
/** How long a closing registration waits for its cut runs to settle. */
const SETTLE_AFTER_CUT = Duration.seconds(5)

type Handler = (message: OutboxWorker.OutboxMessage) => Effect.Effect<void, Publisher.PublishError>

export interface Runners {
  /** Joins a registered workflow to the projector (starting it on the first), for the caller's scope. */
  readonly join: (
    engine: WorkflowEngine["Service"],
    entry: Registration
  ) => Effect.Effect<void, never, Scope.Scope>
}

/** What the projector runs on: the engine's own substrate. */
export type Substrate = EngineSubstrate

export const make = (
  ctx: EngineContext,
  options: PgWorkflowEngineOptions,
  substrate: Context.Context<Substrate>
): Runners => {
  const handlers = new Map<string, Handler>()
  let projecting = false
  let closingSince: number | undefined
  const deadline = Duration.fromInputUnsafe(options.shutdownDeadline ?? "10 seconds")
  const concurrency = options.concurrency ?? 16
  const projector = Projector.layer({
    topics: () => [...handlers.keys()],
    workerId: ctx.workerId,
    batchSize: RUN_BATCH,
    // Room for a batch more than the runs that may run at once: runs blocked in long
    // activities (each holding its lane and its own share) never keep the loops from
    // claiming a full batch for a lane that frees.
    batchesInFlight: Math.min(64, Math.max(3, Math.ceil(concurrency / RUN_BATCH) + 1)),
    concurrency,
    lease: options.lease ?? "30 seconds",
    pollInterval: options.pollInterval ?? "1 second",
    deliveryTimeout: options.runTimeout ?? "1 hour",
    shutdownDeadline: deadline,
    backoff: { min: "100 millis", max: "30 seconds" },
    ...(options.listenUrl === undefined ? {} : { listenUrl: options.listenUrl })
  }).pipe(
    Layer.provide(
      Publisher.layerHandler((message: OutboxWorker.OutboxMessage) =>
        Effect.suspend(() =>
          handlers.get(message.topic)?.(message) ??
            // Claimed just as its workflow's registration closed here: retried later, by the
            // next process that registers it.
            Effect.fail(
              Publisher.retryable(`no workflow of topic ${message.topic} is registered in this process any more`)
            )
        )
      )
    ),
    Layer.provide(Layer.succeedContext(substrate))
  )

  const join = (engine: WorkflowEngine["Service"], entry: Registration) =>
    Effect.gen(function*() {
      const tag = entry.workflow._tag
      const runs = Store.runTopic(tag)
      const clocks = Store.clockTopic(tag)
      // The runs pinned to this process's version, if it has one (`PgWorkflowEngine`'s `pinned`).
      const pinnedRuns = options.version === undefined ? undefined : Store.runTopic(tag, options.version)
      const topics = pinnedRuns === undefined ? [runs, clocks] : [runs, pinnedRuns, clocks]
      // The outbox's rule for topics, here at registration: one refused topic in the shared
      // claim would stop every workflow of the process.
      yield* OutboxWorker.decodeTopics(topics).pipe(
        Effect.catch((error) =>
          Effect.die(
            `workflow ${printable(tag)} cannot run here: its topics ${
              topics.map(printable).join(", ")
            }: ${error.message}${
              pinnedRuns === undefined ? "" : " (a shorter version or workflow name makes its pinned runs' topic fit)"
            }`
          )
        )
      )
      if (handlers.size + topics.length > MAX_TOPICS) {
        return yield* Effect.die(
          `workflow ${printable(tag)} cannot run here: one process runs at most ${
            Math.floor(MAX_TOPICS / topics.length)
          } workflows`
        )
      }
      // What its runs see over the projector's own context: the registering scope's services,
      // the substrate winning (merged once, not per delivery).
      const given = Context.merge(yield* Effect.context<never>(), substrate) as Context.Context<never>
      let inFlight = 0
      let closed = false
      const tracked = <E>(effect: Effect.Effect<void, E>) =>
        Effect.suspend(() => {
          inFlight++
          return effect.pipe(
            Effect.updateContext((current: Context.Context<never>) => Context.merge(current, given)),
            Effect.ensuring(Effect.sync(() => inFlight--))
          )
        })
      // A run that would begin after its registration was cut begins nothing: it replays elsewhere.
      const running: Registration = {
        workflow: entry.workflow,
        execute: (payload, executionId) => closed ? Effect.interrupt : entry.execute(payload, executionId)
      }
      const onRun: Handler = (message) => tracked(Run.runExecution(ctx, engine, running, message))
      const onClock: Handler = (message) => tracked(Wait.fireClock(ctx, tag, message))
      handlers.set(runs, onRun)
      if (pinnedRuns !== undefined) handlers.set(pinnedRuns, onRun)
      handlers.set(clocks, onClock)
      const idle = Effect.repeat(Effect.sync(() => inFlight === 0), {
        until: (done) => done,
        schedule: Schedule.spaced("10 millis")
      })
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          if (handlers.get(runs) === onRun) handlers.delete(runs)
          if (pinnedRuns !== undefined && handlers.get(pinnedRuns) === onRun) handlers.delete(pinnedRuns)
          if (handlers.get(clocks) === onClock) handlers.delete(clocks)
          if (ctx.workflows.get(tag) === entry) ctx.workflows.delete(tag)
          closingSince ??= performance.now()
          const left = Duration.millis(Math.max(0, Duration.toMillis(deadline) - (performance.now() - closingSince)))
          if (yield* Effect.isSuccess(Effect.timeout(idle, left))) return
          closed = true
          const cut = [...ctx.latestRuns.values()].filter((run) => run.workflow._tag === tag && run.fiber !== undefined)
          for (const run of cut) run.instance.abandoned = true
          yield* Fiber.interruptAll(cut.map((run) => run.fiber!))
          yield* Effect.ignore(Effect.timeout(idle, SETTLE_AFTER_CUT))
          yield* Effect.logInfo(
            `effect-durable workflow ${
              printable(tag)
            }: ${cut.length} runs still under way at shutdown were cut; they replay`
          )
        })
      )
      if (projecting) return
      projecting = true
      yield* Layer.buildWithScope(projector, ctx.engineScope).pipe(Effect.orDie)
    })

  return { join }
}
