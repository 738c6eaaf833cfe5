// Scenario 9: durable workflows — effect-durable's PgWorkflowEngine against effect's own
// cluster engine (`ClusterWorkflowEngine` over `SingleRunner`, its SQL message and runner
// storage on the same PostgreSQL), each with its defaults, on a fresh database, the same
// workflow code:
// - starts: N executions started (discard) 16 at a time — starts per second, and executions
//   completed per second (each runs one activity);
// - one activity step: a run of 10 activities in a row, timed inside the run (the engine's cost
//   of an activity: its journal write), median over M executions;
// - a clock wake-up: a 1 s `DurableClock.sleep` (suspended, no in-memory wait), how late after
//   its second the body resumes, median and p95 over M executions started together.
import * as Durable from "@effect-durable/pg/Durable"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as ClusterWorkflowEngine from "effect/cluster/ClusterWorkflowEngine"
import * as SingleRunner from "effect/cluster/SingleRunner"
import * as Digest from "effect/crypto/Digest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import * as Activity from "effect/workflow/Activity"
import * as DurableClock from "effect/workflow/DurableClock"
import * as Workflow from "effect/workflow/Workflow"
import type { WorkflowEngine } from "effect/workflow/WorkflowEngine"
import { formatRate, median, percentile, until } from "../common.js"
import { alternate, type Bench, progress } from "../harness.js"

export const CONCURRENCY = 16
const STEPS = 10
const SLEEP_MILLIS = 1_000

export interface WorkflowRound {
  readonly startRate: number
  readonly completeRate: number
  readonly stepMillis: number
  readonly wakeMillis: number
  readonly wakeP95Millis: number
}

export interface WorkflowResult {
  readonly engines: Record<string, WorkflowRound & { readonly rounds: ReadonlyArray<WorkflowRound> }>
}

const Start = Workflow.make("Bench/Start", {
  payload: { i: Schema.Number },
  success: Schema.Number,
  idempotencyKey: ({ i }) => String(i)
})
const Steps = Workflow.make("Bench/Steps", {
  payload: { i: Schema.Number },
  idempotencyKey: ({ i }) => String(i)
})
const Sleep = Workflow.make("Bench/Sleep", {
  payload: { i: Schema.Number },
  idempotencyKey: ({ i }) => String(i)
})

/** What the bodies report, in this process. */
const observed = { finished: new Set<number>(), stepMillis: [] as Array<number>, wakeMillis: [] as Array<number> }

const workflows = Layer.mergeAll(
  Start.toLayer(({ i }) =>
    Effect.gen(function*() {
      const value = yield* Activity.make({ name: "one", success: Schema.Number, execute: Effect.succeed(i + 1) })
      observed.finished.add(i)
      return value
    })
  ),
  Steps.toLayer(() =>
    Effect.gen(function*() {
      const started = performance.now()
      for (let step = 0; step < STEPS; step++) {
        yield* Activity.make({ name: `step-${step}`, execute: Effect.void })
      }
      observed.stepMillis.push((performance.now() - started) / STEPS)
    })
  ),
  Sleep.toLayer(() =>
    Effect.gen(function*() {
      const slept = yield* Activity.make({ name: "mark", success: Schema.Number, execute: Effect.sync(Date.now) })
      yield* DurableClock.sleep({
        name: "nap",
        duration: Duration.millis(SLEEP_MILLIS),
        inMemoryThreshold: Duration.zero
      })
      observed.wakeMillis.push(Date.now() - slept - SLEEP_MILLIS)
    })
  )
)

interface Engine {
  readonly name: string
  readonly layer: (url: string) => Layer.Layer<WorkflowEngine, unknown>
}

export const engines: ReadonlyArray<Engine> = [
  {
    name: "effect-durable PgWorkflowEngine",
    layer: (url) =>
      PgWorkflowEngine.layer().pipe(
        Layer.provideMerge(Durable.layer({ connection: { url: Redacted.make(url), poolSize: 20 }, migrate: true }))
      )
  },
  {
    name: "ClusterWorkflowEngine (SingleRunner)",
    layer: (url) =>
      ClusterWorkflowEngine.layer.pipe(
        Layer.provideMerge(SingleRunner.layer({ runnerStorage: "sql" })),
        Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 20 })),
        Layer.provideMerge(Digest.layerWebCrypto)
      )
  }
]

const seconds = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.timed(effect), ([took]) => Duration.toSeconds(took))

export const run = async (bench: Bench, executions: number, timed: number): Promise<WorkflowResult> => {
  const measure = async (engine: Engine, round: number, index: number): Promise<WorkflowRound> => {
    const database = `bench_workflows_${index}`
    const url = await bench.freshDatabase(database)
    observed.finished.clear()
    observed.stepMillis.length = 0
    observed.wakeMillis.length = 0
    const result = await Effect.runPromise(
      Effect.gen(function*() {
        const indices = Array.from({ length: executions }, (_, i) => i)
        const began = performance.now()
        const startSeconds = yield* seconds(
          Effect.forEach(indices, (i) => Start.execute({ i }, { discard: true }), {
            concurrency: CONCURRENCY,
            discard: true
          })
        )
        yield* Effect.promise(() => until(() => observed.finished.size === executions, 5))
        const completeSeconds = (performance.now() - began) / 1000
        // One at a time: the step cost without contention.
        for (let i = 0; i < timed; i++) yield* Steps.execute({ i })
        // Started together, woken by their clocks.
        yield* Effect.forEach(Array.from({ length: timed }, (_, i) => i), (i) => Sleep.execute({ i }), {
          concurrency: "unbounded",
          discard: true
        })
        const wakes = [...observed.wakeMillis].sort((a, b) => a - b)
        return {
          startRate: executions / startSeconds,
          completeRate: executions / completeSeconds,
          stepMillis: median(observed.stepMillis),
          wakeMillis: median(wakes),
          wakeP95Millis: percentile(wakes, 0.95)
        }
      }).pipe(
        Effect.provide(workflows.pipe(Layer.provideMerge(engine.layer(url)))),
        Effect.scoped,
        Effect.provideService(References.MinimumLogLevel, "Warn")
      )
    )
    await bench.dropDatabase(database)
    progress(
      round,
      engine.name,
      `starts ${formatRate(result.startRate).padStart(6)} /s  completed ${
        formatRate(result.completeRate).padStart(6)
      } /s  step ${result.stepMillis.toFixed(2)} ms  clock late ${result.wakeMillis.toFixed(0)} ms (p95 ${
        result.wakeP95Millis.toFixed(0)
      })`
    )
    return result
  }
  const rounds = await alternate(bench, engines, measure)
  const of = (values: ReadonlyArray<WorkflowRound>, key: keyof WorkflowRound) => median(values.map((r) => r[key]))
  return {
    engines: Object.fromEntries(engines.map((engine, i) => {
      const values = rounds[i]!
      return [engine.name, {
        startRate: of(values, "startRate"),
        completeRate: of(values, "completeRate"),
        stepMillis: of(values, "stepMillis"),
        wakeMillis: of(values, "wakeMillis"),
        wakeP95Millis: of(values, "wakeP95Millis"),
        rounds: values
      }]
    }))
  }
}
