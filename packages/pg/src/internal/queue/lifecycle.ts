/**
 * The life of a queue row, in one place: its states as SQL over the row's columns, the
 * transitions operators make (redrive, replay, discard), and the counters. A row is
 *
 *   ready      open, unleased, due          (claimable)
 *   delayed    open, unleased, not yet due  (a retry's backoff, an enqueue's delay)
 *   claimed    open, leased                 (a worker holds it until the lease's end)
 *   dead       dead_at set, not cancelled   (a permanent failure, out of attempts or leases)
 *   cancelled  cancelled_at set (dead too)  (called off by an operator or the application)
 *   done       the done column set          (`projected` in the outbox, `processed` in the inbox)
 *
 * Operators move rows: redrive (dead -> ready), replay (done -> ready), discard (dead or
 * cancelled -> gone), retry now (delayed -> ready, attempts kept), move aside (ready or delayed
 * -> dead, with a reason: the row no longer holds back the messages of its ordering key),
 * cancel (ready, delayed or claimed -> cancelled: a claimed one's holder is fenced out, since
 * every fenced write refuses a row with `dead_at` set) and restore (cancelled -> ready).
 * A transition that reopens an outbox row (redrive, replay, restore) leaves it as it is while
 * its dedup key is held by an open message (`reopenable`).
 *
 * Everything that asks "which rows are in state S" or moves rows between states reads it
 * from here: the stats, the operators' filters, the fences, bulk actions, retention, the
 * admin page, the test substrate and chaos. A new state is a migration (its column or
 * value), a line in `STATES` with its predicate and, where operators act on it, a transition.
 */
import type { QueueSpec } from "./spec.js"

/** The states, in the order counts and the page list them. */
export const STATES = ["ready", "delayed", "claimed", "dead", "cancelled", "done"] as const
export type State = typeof STATES[number]

/** What a release that was a permanent failure appends to the row's last error. */
export const PERMANENT_FAILURE = "(dead: a permanent failure)"

/** Whether a dead row's last error says it died of a permanent failure (never retried). */
export const diedPermanently = (lastError: string | null): boolean => lastError?.endsWith(PERMANENT_FAILURE) === true

/** What each queue calls its done state. */
export const doneName = (queue: QueueSpec["queue"]): "projected" | "processed" =>
  queue === "outbox" ? "projected" : "processed"

/** The outbox's names of the states: its done state is `projected`. */
export type OutboxStateName = Exclude<State, "done"> | "projected"
export const OUTBOX_STATE_NAMES: ReadonlyArray<OutboxStateName> = STATES.map((state) =>
  state === "done" ? "projected" : state
)

/** The lifecycle of one queue's rows, as SQL text over its columns (optionally of `alias`). */
export const make = (spec: Pick<QueueSpec, "done" | "queue">, alias?: string) => {
  const c = (column: string) => alias === undefined ? column : `${alias}.${column}`
  const open = `${c(spec.done)} IS NULL AND ${c("dead_at")} IS NULL`
  const liveLease = `${c("claimed_until")} > now()`
  const unleased = `(${c("claimed_until")} IS NULL OR ${c("claimed_until")} <= now())`
  const is: Readonly<Record<State, string>> = {
    ready: `${open} AND ${unleased} AND ${c("available_at")} <= now()`,
    delayed: `${open} AND ${unleased} AND ${c("available_at")} > now()`,
    claimed: `${open} AND ${liveLease}`,
    dead: `${c("dead_at")} IS NOT NULL AND ${c("cancelled_at")} IS NULL`,
    cancelled: `${c("cancelled_at")} IS NOT NULL`,
    done: `${c(spec.done)} IS NOT NULL`
  }
  /** Fresh attempts, deliverable now, no lease: where a redriven or replayed row starts again. */
  const restart = "attempt_count = 0, failure_count = 0, lease_expiries = 0, available_at = now(), claimed_until = NULL"
  return {
    is,
    /** Neither done nor dead: a row still to be delivered (ready, delayed or claimed). */
    open,
    /** A row's state as text: one of `STATES`, the done state by the queue's name for it. */
    stateOf: `CASE WHEN ${is.cancelled} THEN 'cancelled' WHEN ${is.dead} THEN 'dead' WHEN ${is.done} THEN '${
      doneName(spec.queue)
    }' WHEN ${liveLease} THEN 'claimed'
      WHEN ${c("available_at")} > now() THEN 'delayed' ELSE 'ready' END`,
    /** One `count(*) FILTER` per state, as columns named after them. */
    counts: STATES.map((state) => `count(*) FILTER (WHERE ${is[state]})::int AS ${state}`).join(",\n       "),
    /** The oldest ready row's wait, in seconds. */
    oldestReadySeconds: `extract(epoch FROM now() - min(${c("available_at")}) FILTER (WHERE ${is.ready}))::float8`,
    transitions: {
      /** dead -> ready, with fresh attempts. */
      redrive: { from: is.dead, set: `dead_at = NULL, ${restart}` },
      /** done -> ready: deliver once more. */
      replay: { from: is.done, set: `${spec.done} = NULL, ${restart}` },
      /** dead or cancelled -> gone. */
      discard: { from: `${c("dead_at")} IS NOT NULL` },
      /** delayed -> ready: deliverable now, its attempts kept (a retry hurried, a delay cut short). */
      retryNow: { from: is.delayed, set: "available_at = now()" },
      /** ready or delayed -> dead (a claimed row is being delivered: its lease decides first). */
      moveAside: { from: `${open} AND ${unleased}`, set: "dead_at = now()" },
      /** ready, delayed or claimed -> cancelled (`cancelled_by` is set beside it). */
      cancel: { from: open, set: "dead_at = now(), cancelled_at = now(), claimed_until = NULL" },
      /** cancelled -> ready, with fresh attempts. */
      restore: { from: is.cancelled, set: `dead_at = NULL, cancelled_at = NULL, cancelled_by = NULL, ${restart}` }
    }
  } as const
}

export type Lifecycle = ReturnType<typeof make>

/** The transitions that make a closed row open again. */
export type Reopening = "redrive" | "replay" | "restore"

/**
 * What a reopening transition also asks of the row `q` among the rows `asked` names (a
 * relation with an `id` column): in the outbox, that its dedup key (unique among open
 * messages of a topic) is not held by an open message (`open`: the table of open messages),
 * and that it is the first row asked with its key (`from`: the table the rows come from). A
 * row left out stays as it was, and the caller reports it as not moved: before this, a
 * restore whose key a newer message held failed the whole statement (a bulk redrive at 0 of
 * N, a caller's transaction aborted). The inbox has no dedup keys.
 */
export const reopenable = (
  spec: Pick<QueueSpec, "done" | "queue">,
  tables: { readonly open: string; readonly from: string },
  transition: Reopening
) =>
  spec.queue !== "outbox" ? "true" : `(q.dedup_key IS NULL OR (
     NOT EXISTS (SELECT 1 FROM ${tables.open} o
                  WHERE o.topic = q.topic AND o.dedup_key = q.dedup_key AND ${make(spec, "o").open})
     AND q.id = (SELECT min(x.id) FROM ${tables.from} x
                  WHERE x.id IN (SELECT id FROM asked) AND x.topic = q.topic AND x.dedup_key = q.dedup_key
                    AND ${make(spec, "x").transitions[transition].from})))`
