/**
 * What a schedule's due slots become, decided from its cursor (the first slot not yet
 * decided) and the deciding process's clock, without I/O: each slot due by now either runs
 * (it is within the catch-up window and the schedule is not paused) or is missed, and the
 * cursor moves to the first slot after now. The overlap policy is applied later, against the
 * messages the schedule already has open (`decide.ts`).
 *
 * Slots are what `Cron.next` yields, never what `Cron.match` accepts: across a spring-forward
 * night `30 2 * * *` in Europe/Berlin falls due at 03:30 CEST, a time the expression itself
 * does not match (the cursor used to be re-matched and that run was lost, uncounted).
 *
 * `Cron.next` costs tens of microseconds a step, so the work of one decision is bounded
 * whatever the outage: the runs (the latest `MAX_RUN_PER_DECISION` slots of the window) are
 * walked back from now, and the missed slots before them are counted up to
 * `MAX_COUNTED_MISSED` (past it, the count is a lower bound).
 */
import * as Cron from "effect/Cron"

/** Slots counted one by one as missed; past it, the count is a lower bound. */
export const MAX_COUNTED_MISSED = 1000

/** Slots run in one decision at most (the catch-up window's latest slots, oldest first). */
export const MAX_RUN_PER_DECISION = 1000

export interface Plan {
  /** Slots to run now, oldest first (within the catch-up window, not paused). */
  readonly run: ReadonlyArray<Date>
  /** Slots passed without a run (paused, before the catch-up window, or past the most one decision runs). */
  readonly missed: number
  /** Whether `missed` stopped counting at `MAX_COUNTED_MISSED` (it is then a lower bound). */
  readonly missedAtLeast: boolean
  /** The new cursor: the first slot after now. */
  readonly next: Date
  /**
   * How many slots the decision evaluated: its work, bounded by `MAX_RUN_PER_DECISION` +
   * `MAX_COUNTED_MISSED` (and a few), however long the schedule was behind.
   */
  readonly evaluated: number
}

/**
 * The first slot at or after `date`: the slot after the last one before it. Not `Cron.next` of
 * the instant before `date`: from inside a spring-forward gap's shadow (New York, 03:29 EDT on
 * the night 02:30 does not exist) `next` no longer sees the shifted 03:30 run.
 */
export const firstFrom = (cron: Cron.Cron, date: Date): Date => Cron.next(cron, Cron.prev(cron, date))

/**
 * The decision for slots in `[cursor, now]`: run those at or after `now - catchUpMillis`
 * (all of them missed when `paused`), at most `MAX_RUN_PER_DECISION` (the oldest beyond that
 * are missed), and the next cursor.
 */
export const plan = (options: {
  readonly cron: Cron.Cron
  readonly cursor: Date
  readonly now: Date
  readonly catchUpMillis: number
  readonly paused: boolean
}): Plan => {
  const { catchUpMillis, cron, cursor, now, paused } = options
  const next = Cron.next(cron, now)
  const first = firstFrom(cron, cursor)
  const windowStart = paused ? now.getTime() + 1 : now.getTime() - catchUpMillis
  const earliestRun = Math.max(first.getTime(), windowStart)
  // The runs, walked back from the last slot at or before now (`prev` is strict).
  const latestFirst: Array<Date> = []
  for (
    let slot = Cron.prev(cron, new Date(now.getTime() + 1));
    slot.getTime() >= earliestRun && latestFirst.length < MAX_RUN_PER_DECISION;
    slot = Cron.prev(cron, slot)
  ) latestFirst.push(slot)
  const run = latestFirst.reverse()
  const evaluated = run.length + 3
  // Every slot from the cursor up to the first run (or past now, when none runs) is missed.
  const missedBefore = run[0]?.getTime() ?? now.getTime() + 1
  let missed = 0
  let missedAtLeast = false
  for (let slot = first; slot.getTime() < missedBefore; slot = Cron.next(cron, slot)) {
    if (missed === MAX_COUNTED_MISSED) {
      missedAtLeast = true
      break
    }
    missed++
  }
  return { run, missed, missedAtLeast, next, evaluated: evaluated + missed }
}
