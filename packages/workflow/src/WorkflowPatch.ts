/**
 * Patches: a change to a workflow's code that runs in flight must not see. New runs take the
 * patched branch; a run that older code took past this point keeps the old one; a later deploy
 * drops the old branch once no unfinished run can take it (`WorkflowDeploys.patches` says when).
 *
 * ```ts
 * const shipped = yield* WorkflowPatch.ifPatched("ship-with-insurance", {
 *   onTrue: () => ShipInsured.pipe(Effect.asVoid),
 *   onFalse: () => Ship.pipe(Effect.asVoid)
 * })
 * ```
 *
 * The branch is decided the first time a run reaches the patch, and kept in its journal (a
 * marker): every replay takes it again. A run whose journal holds an activity or a clock the code
 * has not asked for again by then was taken past this point by the code before the patch: it
 * takes the old branch. Otherwise (a new run, or one whose old code stopped before the patch) it
 * takes the patched one. (A race replayed from its recorded winner counts its arms as asked; a
 * deferred completed by others counts for nothing.) Ask a patch from the workflow itself, never from an activity's body. Under an
 * engine that keeps no journal (upstream's `WorkflowEngine.layerMemory`) every run is new: the
 * patched branch.
 *
 * @since 0.5.0
 */
import * as Effect from "effect/Effect"
import type { WorkflowInstance } from "effect/workflow/WorkflowEngine"
import { Patches } from "./internal/patches.js"

/** The longest patch id, in characters. */
export const MAX_ID_LENGTH = 128
const ID = /^[A-Za-z0-9][A-Za-z0-9_.:-]*$/

/**
 * Whether this run takes the patched branch of patch `id` (1-128 characters: a letter or digit,
 * then letters, digits, `_ . : -`). An id that breaks the rule is a defect naming it: it is a
 * constant of the code, not input.
 */
export const patched = (id: string): Effect.Effect<boolean, never, WorkflowInstance> =>
  Effect.gen(function*() {
    if (id.length > MAX_ID_LENGTH || !ID.test(id)) {
      return yield* Effect.die(
        `WorkflowPatch.patched: a patch id is 1-${MAX_ID_LENGTH} characters, a letter or digit then letters, digits, _ . : - (got ${
          JSON.stringify(id.slice(0, MAX_ID_LENGTH + 1))
        })`
      )
    }
    const patches = yield* Effect.serviceOption(Patches)
    return patches._tag === "Some" ? yield* patches.value.patched(id) : true
  })

/** `onTrue` where the run takes the patched branch of `id`, else `onFalse` (the code before the patch). */
export const ifPatched = <A1, E1, R1, A2, E2, R2>(
  id: string,
  branches: {
    readonly onTrue: () => Effect.Effect<A1, E1, R1>
    readonly onFalse: () => Effect.Effect<A2, E2, R2>
  }
): Effect.Effect<A1 | A2, E1 | E2, R1 | R2 | WorkflowInstance> =>
  Effect.flatMap(
    patched(id),
    (taken): Effect.Effect<A1 | A2, E1 | E2, R1 | R2> => taken ? branches.onTrue() : branches.onFalse()
  )
