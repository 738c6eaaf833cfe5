/**
 * Patches: which branch of a patched piece of code a run takes, decided once and kept in its
 * journal as a marker (`patch/<id>`), so every later replay takes the same one whatever the code
 * does around it. A run whose journal holds nothing the code has not asked for again yet (a new
 * run, or one whose old code never went past this point) takes the patched branch; a run whose
 * journal holds activities or clocks not asked for again was taken past this point by older code,
 * and keeps the old branch. In doubt the answer is the old branch, which the code still holds while the patch
 * does: it replays what the journal recorded.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import { WorkflowInstance } from "effect/workflow/WorkflowEngine"
import type { EngineContext } from "./engineContext.js"
import { journalKey } from "./engineContext.js"
import type { Run } from "./run.js"

/** What a run of this engine gives the workflow it runs: `WorkflowPatch.patched` asks it. */
export class Patches extends Context.Service<Patches, {
  readonly patched: (id: string) => Effect.Effect<boolean, never, WorkflowInstance>
}>()("@effect-durable/workflow/Patches") {}

/** The branch a run takes at patch `id`: the one its journal holds, else decided and recorded. */
export const forRun = (ctx: EngineContext, run: Run): Patches["Service"] => ({
  patched: (id) =>
    Effect.gen(function*() {
      const instance = yield* WorkflowInstance
      // An activity's body runs on an instance of its own: a marker there would be decided once
      // per attempt of the activity, not once per run.
      if (instance.scope !== run.instance.scope) {
        return yield* Effect.die(
          `WorkflowPatch.patched(${JSON.stringify(id)}): ask it from the workflow, not from an activity's body`
        )
      }
      const key = journalKey("patch", id, 0)
      if (run.journal.has(key)) return run.journal.get(key) === true
      const decided = run.replay.unasked.size === 0
      const recorded = yield* ctx.inRun(
        run,
        ctx.store.recordStep(run.workflow._tag, run.executionId, "patch", id, 0, decided)
      )
      // Another run of this execution (one that lost its lease) may have decided first: its marker stands.
      run.journal.set(key, recorded.result)
      return recorded.result === true
    })
})
