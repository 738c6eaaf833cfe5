/**
 * A run replays its journal against the code deployed now. Divergence is the code and the
 * journal telling different stories, and it stops the run visibly, never silently:
 *
 * - **A new step while recorded ones are unreached.** An activity the journal does not hold may
 *   run only once every activity it holds has been asked for again in this run. While some have
 *   not, the new step waits: under concurrency a recorded step may be asked a little later than a
 *   new one beside it. Each recorded step asked restarts the wait. After a quiet `window` with
 *   some still unreached, the run has diverged (a renamed or reordered step would otherwise run
 *   again under its new name while the recorded one is skipped).
 * - **A completion with recorded steps unreached.** A removed step would otherwise let the run
 *   return a result its journal does not support.
 *
 * Appending steps after the last recorded one is compatible. A race whose winner the journal
 * holds (`Activity.raceAll`, `DurableDeferred.raceAll`) returns it without running its arms:
 * the activities recorded before that winner count as reached. Not checked: a suspension (a run
 * that parks on a wait may end before siblings of the wait are asked), an interrupted run's
 * compensations, a run after a recorded failure replayed (a fail-fast combinator cuts off its
 * siblings), and the order of recorded steps among themselves (a step replays its own recorded
 * result, by name and attempt). A plain `Effect.race` of two activities that both recorded
 * replays its first arm only: the other is unreached (use `Activity.raceAll`, or `divergence:
 * "log"`).
 */
import * as Deferred from "effect/Deferred"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { StepRow, WaitingOn } from "./storeContract.js"

/** The prefix upstream's `raceAll` names the deferred that holds its winner with. */
export const RACE_PREFIX = "raceAll/"

/** Journaled activities not asked for again yet in this run, by journal key. */
export interface Replay {
  readonly unreached: Map<string, { readonly label: string; readonly recorded: number | undefined }>
  /** The races whose winner the journal held when the run began, by deferred name: when recorded. */
  readonly races: ReadonlyMap<string, number>
  /** Done (and replaced) each time a recorded activity is reached. */
  progress: Deferred.Deferred<void>
  /** Set when the run diverged: it settles suspended on it, for an operator. */
  diverged: Extract<WaitingOn, { kind: "diverged" }> | undefined
  /**
   * The steps the code itself recorded (activities, clocks — not deferreds, which others may
   * complete before the code reaches them) when the run began, not asked for again yet, with when
   * each was recorded: a patch asked while any is left was passed by the code that recorded them
   * (`patches.ts`). A race replayed from its recorded winner reaches its arms; nothing else is
   * forgiven.
   */
  readonly unasked: Map<string, number | undefined>
}

export const label = (name: string, attempt: number) => `activity ${name}${attempt > 1 ? ` (attempt ${attempt})` : ""}`

export const make = (steps: ReadonlyArray<StepRow>, key: (step: StepRow) => string): Replay => ({
  unreached: new Map(
    steps.filter((step) => step.kind === "activity").map((
      step
    ) => [key(step), { label: label(step.name, step.attempt), recorded: step.recorded }])
  ),
  races: new Map(
    steps.flatMap((step) =>
      step.kind === "deferred" && step.name.startsWith(RACE_PREFIX) && step.recorded !== undefined
        ? [[step.name, step.recorded] as const]
        : []
    )
  ),
  progress: Deferred.makeUnsafe<void>(),
  diverged: undefined,
  unasked: new Map(
    steps.filter((step) => step.kind === "activity" || step.kind === "clock").map((step) => [key(step), step.recorded])
  )
})

const progressed = (replay: Replay) => {
  const done = replay.progress
  replay.progress = Deferred.makeUnsafe<void>()
  Deferred.doneUnsafe(done, Effect.void)
}

/** The code asked for an activity: if the journal holds it, it is reached. */
export const reached = (replay: Replay, key: string): void => {
  replay.unasked.delete(key)
  if (replay.unreached.delete(key)) progressed(replay)
}

/** The code scheduled a clock: a journal step asked for again (not checked for divergence). */
export const asked = (replay: Replay, key: string): void => {
  replay.unasked.delete(key)
}

/**
 * A recorded failure replayed (an activity's, a deferred's): it returns at once, and a fail-fast
 * combinator around it (`Effect.all`) cuts off siblings it recorded beside it the first time, so
 * what is unreached after it says nothing. The run is no longer checked.
 */
export const failureReplayed = (replay: Replay): void => forgive(replay)

/** Nothing left to wait for or to report (in `log` mode, once it was said). */
export const forgive = (replay: Replay): void => {
  if (replay.unreached.size === 0) return
  replay.unreached.clear()
  progressed(replay)
}

/** A deferred the run read: a race's winner the journal held reaches what was recorded before it. */
export const deferredRead = (replay: Replay, name: string): void => {
  const recorded = replay.races.get(name)
  if (recorded === undefined) return
  for (const [key, at] of replay.unasked) if (at !== undefined && at <= recorded) replay.unasked.delete(key)
  let any = false
  for (const [key, step] of replay.unreached) {
    if (step.recorded !== undefined && step.recorded <= recorded) {
      replay.unreached.delete(key)
      any = true
    }
  }
  if (any) progressed(replay)
}

/**
 * Before a new step: waits while recorded activities are unreached, each one reached restarting
 * the `window`; the labels still unreached after a quiet window (none: the step may run).
 */
export const awaitReached = (replay: Replay, window: Duration.Duration): Effect.Effect<ReadonlyArray<string>> =>
  Effect.gen(function*() {
    while (replay.unreached.size > 0) {
      const moved = yield* Effect.timeoutOption(Deferred.await(replay.progress), window)
      if (Option.isNone(moved)) return [...replay.unreached.values()].map((step) => step.label)
    }
    return []
  })

/** The labels of the recorded activities a run ended without reaching. */
export const unreachedAtEnd = (replay: Replay): ReadonlyArray<string> =>
  [...replay.unreached.values()].map((step) => step.label)
