/**
 * What a schedule's due slots become, decided from its cursor (the first slot not yet
 * decided) and the deciding process's clock, without I/O: each slot due by now either runs
 * (it is within the catch-up window and the schedule is not paused) or is missed, and the
 * cursor moves to the first slot after now. The overlap policy is applied later, against the
 * messages the schedule already has open (`decide.ts`).
 *
 * `Cron.next` costs tens of microseconds a step, so a long outage of a frequent schedule is
 * not walked slot by slot: the slots before the catch-up window are counted up to
 * `MAX_COUNTED_MISSED` and the walk jumps to the window's start.
 */
import * as Cron from "effect/Cron"

/** Slots counted one by one before the catch-up window; past it, the count is a lower bound. */
export const MAX_COUNTED_MISSED = 1000

/** Slots run in one decision at most (the catch-up window's slots, oldest first). */
export const MAX_RUN_PER_DECISION = 1000

export interface Plan {
  /** Slots to run now, oldest first (within the catch-up window, not paused). */
  readonly run: ReadonlyArray<Date>
  /** Slots passed without a run (paused, or before the catch-up window). */
  readonly missed: number
  /** Whether `missed` stopped counting at `MAX_COUNTED_MISSED` (it is then a lower bound). */
  readonly missedAtLeast: boolean
  /** The new cursor: the first slot after now. */
  readonly next: Date
}

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
  const windowStart = paused ? now.getTime() + 1 : now.getTime() - catchUpMillis
  let missed = 0
  let missedAtLeast = false
  // The first slot at or after the cursor (the cursor is a slot, or the moment a schedule began).
  let slot = Cron.match(cron, cursor) ? cursor : Cron.next(cron, cursor)
  while (slot.getTime() < windowStart && slot.getTime() <= now.getTime()) {
    if (missed === MAX_COUNTED_MISSED) {
      missedAtLeast = true
      // Jump to the window: the first slot at or after its start.
      const start = new Date(windowStart - 1)
      slot = Cron.next(cron, start)
      break
    }
    missed++
    slot = Cron.next(cron, slot)
  }
  const run: Array<Date> = []
  while (slot.getTime() <= now.getTime()) {
    run.push(slot)
    slot = Cron.next(cron, slot)
  }
  const over = run.length - MAX_RUN_PER_DECISION
  return over > 0
    ? { run: run.slice(over), missed: missed + over, missedAtLeast, next }
    : { run, missed, missedAtLeast, next }
}
