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
import { printable } from "@effect-durable/core/Printable"
import type { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxMemory from "@effect-durable/pg/OutboxMemory"
import type * as OutboxStatements from "@effect-durable/pg/OutboxStatements"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import type * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Activity from "effect/workflow/Activity"
import * as Workflow from "effect/workflow/Workflow"
import { WorkflowEngine } from "effect/workflow/WorkflowEngine"
import * as WorkflowEngineModule from "effect/workflow/WorkflowEngine"
import * as Activities from "./internal/activity.js"
import * as Codec from "./internal/codec.js"
import * as EngineContext from "./internal/engineContext.js"
import * as MemoryStore from "./internal/memoryStore.js"
import * as EngineMetrics from "./internal/metrics.js"
import * as Replay from "./internal/replay.js"
import * as Replayer from "./internal/replayer.js"
import * as Runners from "./internal/runners.js"
import { VERSION_PATTERN, VERSION_RULE } from "./internal/storeContract.js"
import * as Wait from "./internal/wait.js"
import * as WorkflowAttributes from "./WorkflowAttributes.js"
import * as WorkflowLimits from "./WorkflowLimits.js"
import * as WorkflowStore from "./WorkflowStore.js"

export interface PgWorkflowEngineOptions {
  /**
   * Refuse (as a defect of the caller's `execute`) a start of an existing execution id with
   * another payload. Default false: as upstream, the first payload stands; the mismatch is
   * counted on the execution, logged and counted in `effect_durable_workflow_payload_mismatches`.
   */
  readonly strictPayloads?: boolean
  /** The run projector's lease. Default 30 seconds. */
  readonly lease?: Duration.Input
  /** How long one run may take (its activities included). Default 1 hour, at most 1 day. */
  readonly runTimeout?: Duration.Input
  /**
   * How long shutting down waits for runs under way before it cuts them (a cut run is
   * abandoned: its execution replays in the next process). Default 10 seconds.
   */
  readonly shutdownDeadline?: Duration.Input
  /**
   * Runs at once in this process, all its workflows together (they share one projector, as a
   * worker's slots are shared). A workflow whose runs sit long in activities takes lanes from the
   * others: give it a limit (`WorkflowLimits`) or raise this. Default 16.
   */
  readonly concurrency?: number
  /** How often the run projector polls when no NOTIFY arrives. Default 1 second. */
  readonly pollInterval?: Duration.Input
  /**
   * The worker id the run projector claims under (shown with each claim in `status`). Default
   * `workflow:<pid>:<random>`, new in every process.
   */
  readonly workerId?: string
  /**
   * False: this process starts, signals, polls and interrupts executions of the workflows it
   * registers but runs none (no projector; a web tier beside the runners). Default true.
   */
  readonly runs?: boolean
  /**
   * Behind a transaction pooler (PgBouncer), a direct URL for the run projector's LISTEN
   * connection (the pool cannot carry it), as `Projector.layer`'s `listenUrl`.
   */
  readonly listenUrl?: Redacted.Redacted<string>
  /**
   * What a run does when the code deployed now and its journal diverge (docs/workflows.md,
   * "Deploying changes"): `stop` (default) settles it suspended on the divergence, both sides
   * named, for an operator's resume under code that agrees with the journal; `log` logs and
   * counts it (`effect_durable_workflow_divergences`) and goes on.
   */
  readonly divergence?: "stop" | "log"
  /**
   * How long a new step waits, with recorded steps not yet asked for again in its run, for the
   * next of them to be asked (concurrent branches replay in any order) before the run diverges.
   * Default 5 seconds.
   */
  readonly replayWindow?: Duration.Input
  /**
   * The deploy version of the code this process runs (a release tag, a commit): recorded on
   * each execution it starts, shown by `WorkflowAdmin`, the CLI and the page (docs/workflows.md,
   * "Deploying changes"): 1-64 characters, a letter or digit then letters, digits, `. _ : + / -`
   * (it names the topic of the runs pinned to it). Default: none recorded.
   */
  readonly version?: string
  /**
   * Pin the executions this process starts to its `version` (required then): their runs go to
   * the version's topic (`workflow.run:<name>@<version>`), which only processes of that version
   * claim, so a rolling deploy finishes old runs on old code while new runs start on new code.
   * Every process with a version serves the runs pinned to it. Default false: any process of the
   * workflow runs them (auto-upgrade, checked for divergence).
   */
  readonly pinned?: boolean
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

/** The engine's metrics (`effect_durable_workflow_*`): runs, activities, divergences, payload mismatches. */
export const metrics = EngineMetrics.metrics

export const make = (
  options: PgWorkflowEngineOptions = {}
): Effect.Effect<WorkflowEngine["Service"], never, EngineContext.Substrate | Scope.Scope> =>
  Effect.map(build(options, { withSql: true, replayOnly: false }), ({ engine }) => engine)

/**
 * The engine and what its rooms share. `withSql` false: a `SqlClient` around it is not its own
 * (the in-memory store); `replayOnly`: runs replay their journal and run nothing past it
 * (`WorkflowReplay`).
 */
const build = (
  options: PgWorkflowEngineOptions,
  mode: { readonly withSql: boolean; readonly replayOnly: boolean }
): Effect.Effect<
  { readonly engine: WorkflowEngine["Service"]; readonly ctx: EngineContext.EngineContext },
  never,
  EngineContext.Substrate | Scope.Scope
> =>
  Effect.gen(function*() {
    if (options.version !== undefined && !VERSION_PATTERN.test(options.version)) {
      return yield* Effect.die(`PgWorkflowEngine: version is ${VERSION_RULE} (got ${JSON.stringify(options.version)})`)
    }
    if (options.pinned === true && options.version === undefined) {
      return yield* Effect.die("PgWorkflowEngine: pinned runs need the version they pin to (give `version`)")
    }
    const ctx = yield* EngineContext.make({
      workerId: options.workerId,
      metrics,
      Transactional,
      ...mode,
      replay: {
        divergence: options.divergence ?? "stop",
        window: Duration.fromInputUnsafe(options.replayWindow ?? "5 seconds")
      }
    })
    const { guarded, latestRuns, store, workflows } = ctx
    const substrate = yield* Effect.context<EngineContext.Substrate>()

    const runners = Runners.make(ctx, options, substrate)

    const engine: WorkflowEngine["Service"] = WorkflowEngineModule.makeUnsafe({
      register: (workflow, execute) =>
        Effect.gen(function*() {
          const existing = workflows.get(workflow._tag)
          if (existing !== undefined) {
            // One definition (and one projector) per name: the same one again is a no-op;
            // another one is ignored with a warning, as the cluster engine does.
            if (existing.workflow !== workflow) {
              yield* Effect.logWarning(
                `effect-durable workflow ${printable(workflow._tag)}: already registered with payload shape ${
                  Codec.payloadShape(existing.workflow)
                }; ignoring another definition with payload shape ${Codec.payloadShape(workflow)}`
              )
            }
            return
          }
          const entry = { workflow, execute }
          workflows.set(workflow._tag, entry)
          if (options.runs === false) return
          yield* runners.join(engine, entry)
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
          // A bad attribute is the caller's error: a defect of `execute` (its error channel is the
          // workflow's), said by name, before anything is written.
          const attributes = yield* Effect.orDie(WorkflowAttributes.validate(yield* WorkflowAttributes.StartAttributes))
          // The group by the registered definition (a caller may hold the one without `groupBy`).
          const group = yield* Effect.orDie(
            WorkflowLimits.groupOf(workflows.get(workflow._tag)!.workflow, opts.payload)
          )
          // A child's result is not in its parent's journal: a replay stops at it.
          if (ctx.replayOnly && opts.parent !== undefined) return new Workflow.Suspended({}) as never
          // A child of a pinned run is pinned to its parent's version, whatever this process pins.
          const parentPin = opts.parent === undefined
            ? null
            : ctx.runsByInstance.get(opts.parent.scope)?.pinnedTo ?? null
          const started = yield* guarded(
            store.start({
              workflow: workflow._tag,
              executionId: opts.executionId,
              payload,
              parent,
              attributes,
              group,
              version: parentPin ?? options.version,
              pinned: parentPin !== null || options.pinned === true
            })
          )
          if (started.mismatch) {
            yield* Metric.update(metrics.payloadMismatches, 1)
            if (options.strictPayloads === true) {
              return yield* Effect.die(new PayloadMismatch({ workflow: workflow._tag, executionId: opts.executionId }))
            }
            yield* Effect.logWarning(
              `effect-durable workflow ${printable(workflow._tag)} ${
                printable(opts.executionId)
              }: started again with another payload; the first one stands`
            )
          }
          if (opts.discard) return undefined as never
          if (opts.parent !== undefined) {
            // A child, from inside its parent's run: its result if it has one, else the parent
            // suspends (the child's completion wakes it). Never a wait: parents holding their
            // runs while their children queue behind them for the same projector could deadlock.
            const current = yield* guarded(store.read(workflow._tag, opts.executionId))
            const result = current === undefined || current.status === "pending" || current.status === "running"
              ? new Workflow.Suspended({})
              : yield* Codec.decodeWorkflowResult(workflow, current.result)
            if (result._tag === "Suspended") {
              // Said by the parent's settle: it waits on this child.
              ctx.runsByInstance.get(opts.parent.scope)?.childrenAwaited.push({
                workflow: workflow._tag,
                executionId: opts.executionId
              })
            }
            return result as never
          }
          if (yield* ctx.inCallerTransaction) {
            return yield* Effect.die(
              `${workflow._tag}.execute inside a transaction can only start it (discard: true): its run cannot begin before the transaction commits`
            )
          }
          return (yield* Wait.waitFor(ctx, workflow, opts.executionId, () => true)) as never
        }),
      awaitComplete: (workflow, executionId) =>
        Effect.asVoid(Wait.waitFor(ctx, workflow, executionId, (result) => result._tag === "Complete")),
      poll: (workflow, executionId) => Wait.resultOf(ctx, workflow, executionId),
      interrupt: (workflow, executionId) =>
        Effect.asVoid(guarded(store.requestInterrupt(workflow._tag, executionId, false))),
      interruptUnsafe: (workflow, executionId) =>
        Effect.gen(function*() {
          yield* guarded(store.requestInterrupt(workflow._tag, executionId, true))
          const run = latestRuns.get(EngineContext.runId(workflow._tag, executionId))
          if (run?.fiber !== undefined) {
            // Cut now; its finalizers are skipped: the replay runs the compensations, once.
            run.instance.abandoned = true
            yield* Fiber.interrupt(run.fiber)
          }
        }),
      resume: (workflow, executionId) => guarded(store.wake(workflow._tag, executionId, "explicit")),
      activityExecute: (activity, attempt) => Activities.execute(ctx, activity, attempt),
      deferredResult: (deferred) => Wait.deferredResult(ctx, deferred),
      deferredDone: (completion) => Wait.deferredDone(ctx, completion),
      scheduleClock: (workflow, opts) =>
        Effect.flatMap(ctx.currentRun, (run) => {
          if (run !== undefined) Replay.asked(run.replay, EngineContext.journalKey("clock", opts.clock.name, 0))
          return ctx.inRun(
            run,
            store.scheduleClock(
              workflow._tag,
              opts.executionId,
              opts.clock.name,
              opts.clock.deferred.name,
              opts.clock.duration
            )
          )
        })
    })
    return { engine, ctx }
  })

/**
 * The engine as a layer over the substrate (`Durable.layer`): one projector runs the
 * executions of every workflow registered in the process, over their topics.
 */
export const layer = (
  options: PgWorkflowEngineOptions = {}
): Layer.Layer<
  WorkflowEngine,
  never,
  | SqlClient.SqlClient
  | DurableSettings
  | Outbox.Outbox
  | OutboxStatements.OutboxStatements
  | OutboxWorker.OutboxWorker
> =>
  // Fresh: two engines built together over two substrates each get a store of their own.
  Layer.effect(WorkflowEngine, make(options)).pipe(Layer.provide(Layer.fresh(WorkflowStore.layer)))

/**
 * The engine in memory (`WorkflowStore.layerMemory` over `OutboxMemory.layer`), for tests of
 * workflow code on `TestClock`: the same runs, journal, fences and wakes, in milliseconds, with
 * nothing durable and no SQL (docs/testing.md, "Workflows in memory"). `OutboxMemory` is given
 * too: its rows show the run and clock messages, and its `setLimit` limits a workflow's topic
 * (`WorkflowLimits.topic`) as `WorkflowLimits.set` does on PostgreSQL.
 */
export const layerMemory = (
  options: Omit<PgWorkflowEngineOptions, "listenUrl" | "runs"> = {}
): Layer.Layer<WorkflowEngine | OutboxMemory.OutboxMemory> =>
  Layer.effect(
    WorkflowEngine,
    Effect.map(build(options, { withSql: false, replayOnly: false }), ({ engine }) => engine)
  ).pipe(
    Layer.provide(Layer.fresh(WorkflowStore.layerMemory)),
    Layer.provideMerge(OutboxMemory.layer())
  )

/**
 * The engine in memory in replay mode, and the `Replayer` that replays journals taken from a
 * database against the workflows registered beside it (`WorkflowReplay.layer`: use that).
 */
export const layerReplay = (
  options: Pick<PgWorkflowEngineOptions, "replayWindow"> = {}
): Layer.Layer<WorkflowEngine | Replayer.Replayer> =>
  Layer.effectContext(
    Effect.gen(function*() {
      const store = MemoryStore.make(yield* Outbox.Outbox, yield* OutboxWorker.OutboxWorker)
      const { ctx, engine } = yield* build(
        { replayWindow: options.replayWindow ?? "100 millis", pollInterval: "20 millis" },
        { withSql: false, replayOnly: true }
      ).pipe(Effect.provideService(WorkflowStore.WorkflowStore, store))
      return Context.make(WorkflowEngine, engine).pipe(
        Context.add(Replayer.Replayer, Replayer.make(ctx, store))
      )
    })
  ).pipe(
    Layer.provide(OutboxMemory.layer()),
    // Live time whatever the test's clock: a replay waits on nothing but its own runs.
    Layer.provide(Layer.succeed(Clock.Clock, Clock.Clock.defaultValue()))
  )
