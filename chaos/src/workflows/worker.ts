/**
 * A workflow runner process of the workflow schedule: `PgWorkflowEngine` over the substrate,
 * running `ChaosOrder` executions under its code version (its run projector claims under this
 * worker's id, so the faults find its claims). SIGTERM closes its scope. Run by main.ts as
 * `node dist/workflows/worker.js <config JSON> <run dir>`.
 */
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { READY } from "../schema.js"
import { type WorkerConfig, workerSubstrate } from "../substrate.js"
import { layer } from "./schema.js"

const config: WorkerConfig = JSON.parse(process.argv[2]!)

const substrate = workerSubstrate(config)

const runner = layer(config.workerId, config.version ?? "A").pipe(
  Layer.provideMerge(PgWorkflowEngine.layer({
    workerId: config.workerId,
    version: config.version ?? "A",
    ...(config.leaseMillis === undefined ? {} : { lease: config.leaseMillis }),
    ...(config.listenUrl === undefined ? {} : { listenUrl: Redacted.make(config.listenUrl) })
  })),
  Layer.provideMerge(substrate)
)

Effect.scoped(Effect.gen(function*() {
  yield* Layer.build(runner)
  console.log(READY)
  return yield* Effect.never
})).pipe(
  Effect.tapCause((cause) => Effect.logError(`chaos workflow runner ${config.workerId} failed`, cause)),
  NodeRuntime.runMain
)
