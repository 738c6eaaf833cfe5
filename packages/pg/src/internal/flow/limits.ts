/**
 * Where a queue's limits are rows (a topic's, an inbox consumer's), the lock that orders their
 * claims against a change of limits, and the rule a lease renewal of a limited queue obeys: the
 * live text of what the claim functions hold, for the runtime code that must agree with them.
 */

/** `t(name)`: the schema-qualified, quoted name of a table or function. */
export type Tables = (table: string) => string

/** Where a queue's limits are rows: the table and the column a row of the queue names them by. */
export interface Limits {
  readonly table: string
  readonly key: string
}

/** The outbox's limits, per topic. */
export const TOPIC_LIMITS: Limits = { table: "flow_limits", key: "topic" }

/** The stored inbox's limits, per consumer. */
export const CONSUMER_LIMITS: Limits = { table: "inbox_limits", key: "consumer" }

/**
 * The advisory lock (two-key form, its own key space) every claim of `limits` takes shared and
 * a change of them exclusive: once it is held exclusive, no such claim is under way.
 */
export const limitsLock = (t: Tables, limits: Limits) => `'${t(limits.table)}'::regclass::oid::integer, 17`

/**
 * What a lease renewal of `q` (a row of the queue) also asks (`lease`: the new lease's seconds,
 * an SQL expression): its queue key has no limits, or its lease still runs, by the clock, a
 * sixth of a lease from now (at least a second). A lease that ran out on a limited queue stays
 * out: its capacity may already be another claim's. The clock, not `now()`: a renewal that
 * began in time but ran late (its backend starved) must not count as in time.
 */
export const renewableInTime = (t: Tables, q: string, lease: string, limits: Limits) =>
  `(${q}.claimed_until > clock_timestamp() + make_interval(secs => greatest(${lease} / 6, 1)) OR NOT EXISTS (SELECT 1 FROM ${
    t(limits.table)
  } l WHERE l.${limits.key} = ${q}.${limits.key}))`
