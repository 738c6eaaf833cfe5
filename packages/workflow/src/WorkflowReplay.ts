/**
 * A replay test before a deploy: journals taken from a database (`histories`) or exported by the
 * CLI (`effect-durable workflows show <workflow> <id> --json`) replayed against the code about to
 * be deployed, failing with `ReplayDiverged` where the code and a journal tell different stories
 * — the run that deploy would stop, caught in the test suite instead — and `ReplayFailed` where
 * the code cannot replay it at all (its payload or a recorded result no longer decodes, a defect).
 *
 * ```ts
 * layer(OrderLayer.pipe(Layer.provideMerge(WorkflowReplay.layer())))("the deploy", (it) => {
 *   it.effect("replays the journals of production", () => WorkflowReplay.replayAll(journals))
 * })
 * ```
 *
 * The replay engine runs in memory: recorded steps answer from the journal and nothing past it
 * runs — a new activity or a child stops the run there (appending steps is compatible). The rules
 * are the engine's (docs/workflows.md, "Deploying changes"), on live time whatever the test's
 * clock. A child's result is in the child's journal, not its parent's: a replay stops at the
 * first child.
 *
 * @since 0.5.0
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import type { DurableSettings } from "@effect-durable/pg/DurableConfig"
import type * as Outbox from "@effect-durable/pg/Outbox"
import type * as OutboxStatements from "@effect-durable/pg/OutboxStatements"
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import * as Replayer from "./internal/replayer.js"
import * as PgWorkflowEngine from "./PgWorkflowEngine.js"
import * as WorkflowAdmin from "./WorkflowAdmin.js"

export { History, ReplayDiverged, Replayer, ReplayFailed } from "./internal/replayer.js"
export type { Replayed } from "./internal/replayer.js"

/**
 * The replay engine (a `WorkflowEngine` in memory, in replay mode) and its `Replayer`: provide
 * the workflows' layers (`Workflow.toLayer`) with it, as the engine's. `replayWindow` (default
 * 100 ms): how long a new step waits for recorded ones beside it before the replay diverges.
 */
export const layer = PgWorkflowEngine.layerReplay

/** Replays one history; `InvalidInput` when it is not one, or names a workflow not registered. */
export const replay = (
  history: unknown
): Effect.Effect<
  Replayer.Replayed,
  Replayer.ReplayDiverged | Replayer.ReplayFailed | InvalidInput,
  Replayer.Replayer
> => Effect.flatMap(Replayer.Replayer, (replayer) => replayer.replay(history))

/** Replays each history in turn; the first divergence fails it. */
export const replayAll = (
  histories: Iterable<unknown>
): Effect.Effect<
  ReadonlyArray<Replayer.Replayed>,
  Replayer.ReplayDiverged | Replayer.ReplayFailed | InvalidInput,
  Replayer.Replayer
> => Effect.forEach(histories, replay)

/**
 * Histories read from a database (the most recently changed first, at most `limit`): what a
 * replay test replays, or what a script exports for one.
 */
export const histories = (options: {
  readonly workflow: string
  readonly status?: WorkflowAdmin.Status | undefined
  readonly limit: number
}): Effect.Effect<
  ReadonlyArray<Replayer.History>,
  InvalidInput | DatabaseError,
  SqlClient.SqlClient | DurableSettings | Outbox.Outbox | OutboxStatements.OutboxStatements
> =>
  Effect.gen(function*() {
    const admin = yield* WorkflowAdmin.make
    const listed = yield* admin.list(options)
    const shown = yield* Effect.forEach(listed, (execution) => admin.show(execution.workflow, execution.executionId))
    return shown.flatMap((execution) =>
      execution === undefined ? [] : [{
        workflow: execution.workflow,
        executionId: execution.executionId,
        payload: execution.payload,
        steps: execution.steps
      }]
    )
  })
