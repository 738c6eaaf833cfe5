/**
 * In-process preemption for completions written outside the engine's own `deferredDone` (the
 * deferred endpoint writes through the store, in its inbox transaction). A run parked on a
 * deferred (inside `DurableDeferred.raceAll`, say) is interrupted and replays at once when the
 * completion lands in the same process, as it is when `DurableDeferred.done` is called there.
 * Engines register here by the `SqlClient` they run on: the endpoint finds the engine of its
 * own process through the same client, and nothing when the runs live elsewhere (they see the
 * completion through the wake sequence when they settle).
 */
import type * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"

type Preempt = (executionId: string, deferredName: string) => Effect.Effect<void>

const engines = new WeakMap<SqlClient.SqlClient, Preempt>()

export const register = (sql: SqlClient.SqlClient, preempt: Preempt): void => {
  engines.set(sql, preempt)
}

export const lookup = (sql: SqlClient.SqlClient): Preempt | undefined => engines.get(sql)
