/**
 * Where the workflow engine keeps executions and their step journal: one storage contract
 * (starts, runs, the journal, wakes, fenced settles) with two drivers.
 *
 * - `layer`: PostgreSQL, the engine's own tables, each call joining the caller's transaction
 *   when there is one. What `PgWorkflowEngine.layer` runs on.
 * - `layerMemory`: one process's maps over the in-memory outbox (`OutboxMemory`), whose claims
 *   fence settles as PostgreSQL's do. What `PgWorkflowEngine.layerMemory` runs on: workflow code
 *   tested on `TestClock` in milliseconds. Nothing is durable, and what only PostgreSQL holds is
 *   not there: transactions (a transactional activity's body runs outside one; a start or a
 *   signal cannot join a caller's transaction), `WorkflowAdmin`, the deferred endpoint.
 *
 * @since 0.5.0
 */
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxStatements from "@effect-durable/pg/OutboxStatements"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import * as MemoryStore from "./internal/memoryStore.js"
import * as PgStore from "./internal/store.js"
import type { Store } from "./internal/storeContract.js"

export type {
  ExecutionRow,
  Recorded,
  Status,
  StepKind,
  StepRow,
  Store as Contract,
  WaitingOn,
  WakeMode
} from "./internal/storeContract.js"

/** The engine's storage, by its contract. */
export class WorkflowStore extends Context.Service<WorkflowStore, Store>()("@effect-durable/workflow/WorkflowStore") {}

/** The PostgreSQL driver, over the substrate (`Durable.layer`). */
export const layer: Layer.Layer<
  WorkflowStore,
  never,
  SqlClient.SqlClient | DurableSettings | Outbox.Outbox | OutboxStatements.OutboxStatements
> = Layer.effect(
  WorkflowStore,
  Effect.gen(function*() {
    return PgStore.make(
      yield* SqlClient.SqlClient,
      yield* DurableSettings,
      yield* Outbox.Outbox,
      yield* OutboxStatements.OutboxStatements
    )
  })
)

/** The in-memory driver, over an outbox and its worker (`OutboxMemory.layer`), empty at build. */
export const layerMemory: Layer.Layer<WorkflowStore, never, Outbox.Outbox | OutboxWorker.OutboxWorker> = Layer
  .effect(
    WorkflowStore,
    Effect.gen(function*() {
      return MemoryStore.make(yield* Outbox.Outbox, yield* OutboxWorker.OutboxWorker)
    })
  )
