/**
 * Where a queue's limits are rows (a topic's, an inbox consumer's) and where its claims record
 * the capacity they took, the lock that orders their claims against a change of limits, and the
 * rule a lease renewal of a limited queue obeys: the live text the claim functions and the
 * runtime code share, written once for both queues.
 */

/** `t(name)`: the schema-qualified, quoted name of a table or function. */
export type Tables = (table: string) => string

/**
 * A limited queue: the outbox (limits per topic) or the stored inbox (per consumer). Everything
 * flow control writes or reads of a queue is named here, so the outbox's and the inbox's limits,
 * slots and counts are one text with two parameters.
 */
export interface Limits {
  /** The table of its limits, a row per key. */
  readonly table: string
  /** The column that names a row's key (in the limits, the claims and the queue). */
  readonly key: string
  /** The table where its claims record what they took: a row per claim (and group). */
  readonly claims: string
  /** The queue's table of open entries. */
  readonly queue: string
  /** The queue's column that is set once an entry is settled. */
  readonly settled: string
}

/** The outbox's limits, per topic. */
export const TOPIC_LIMITS: Limits = {
  table: "flow_limits",
  key: "topic",
  claims: "flow_claims",
  queue: "outbox",
  settled: "projected_at"
}

/** The stored inbox's limits, per consumer. */
export const CONSUMER_LIMITS: Limits = {
  table: "inbox_limits",
  key: "consumer",
  claims: "inbox_flow_claims",
  queue: "inbox",
  settled: "processed_at"
}

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
