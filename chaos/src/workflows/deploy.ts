/**
 * The workflow schedule's rolling deploy (`--deploy`): every runner starts on code version A;
 * over the middle of the production window they are replaced one by one by version B, each
 * stopped as a deploy stops a process (SIGTERM: runs under way finish or are cut and replay) and
 * started on the new code, while the faults go on. Runs in flight meet B's code on their next run.
 *
 * While both versions run, a run may diverge on either side: under B, a run A took past B's
 * unguarded rename; under A, a run B began (A does not know B's patched branch or its renames).
 * Once every runner runs B, the operator's move: every diverged run resumed, under B. Those B
 * agrees with complete; those only the unguarded rename stops diverge again, for good.
 */
import * as Durable from "@effect-durable/pg/Durable"
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"
import type { Workers } from "../workers.js"
import { ChaosOrder, type CodeVersion } from "./schema.js"

export const run = (options: {
  readonly workers: Workers
  /** A direct URL of the database (the resume sweep's substrate). */
  readonly url: string
  /** The code version each slot starts with, by slot index (read when a slot's process starts). */
  readonly versions: Map<number, CodeVersion>
  readonly startedAt: number
  readonly productionMillis: number
  readonly log: (line: string) => void
}): Effect.Effect<number> =>
  Effect.gen(function*() {
    const { slots } = options.workers
    for (const [i, slot] of slots.entries()) {
      // From 20% to 70% of the window, evenly.
      const at = options.startedAt + options.productionMillis * (0.2 + (0.5 * i) / Math.max(1, slots.length - 1))
      yield* Effect.sleep(Duration.millis(Math.max(0, at - Date.now())))
      options.versions.set(slot.index, "B")
      const was = slot.workerId
      yield* Effect.promise(() => options.workers.replace(slot))
      options.log(`deploy: ${was} (code A) replaced by ${slot.workerId} (code B), ${i + 1} of ${slots.length}`)
    }
    const resumed = yield* resumeDiverged.pipe(
      Effect.provide(
        Durable.layer({ connection: { url: Redacted.make(options.url), applicationName: "chaos-deploy" } })
      ),
      // Through a fault (a restart, a terminated backend): again, until it gets through.
      Effect.retry({ schedule: Schedule.spaced("1 second"), times: 60 }),
      Effect.orDie
    )
    options.log(`deploy: every runner on code B; ${resumed} diverged runs resumed under it`)
    return slots.length
  })

/** Resumes every diverged execution of the schedule's workflow; how many. */
const resumeDiverged = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const admin = yield* WorkflowAdmin.make
  const diverged = yield* sql<{ execution_id: string }>`
    SELECT execution_id FROM durable.workflow_executions
     WHERE workflow = ${ChaosOrder._tag} AND status = 'suspended' AND waiting_on @> '[{"kind":"diverged"}]'`
  yield* Effect.forEach(diverged, (row) => admin.resume(ChaosOrder._tag, row.execution_id), { discard: true })
  return diverged.length
})
