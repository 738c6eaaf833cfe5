/**
 * A limited queue's capacity as its claims record it: one row per claim (and group) in its
 * claims table (`flow_claims`, `inbox_flow_claims`) with the entries it took and their
 * generations, spread over capacity slots. An entry still holds its capacity while it is open,
 * at the generation it was claimed at, its lease running. Written once for both queues: the
 * claim functions and the runtime code read the same text.
 */
import type { Limits, Tables } from "./limits.js"

/** Share of a limit one slot holds at most, and the most slots a limit has. */
const SLOT_SIZE = 16
const MAX_SLOTS = 8

/** How many slots a limit of `cap` (SQL) has. */
export const slotCount = (cap: string) => `least(${MAX_SLOTS}, greatest(1, ${cap} / ${SLOT_SIZE}))`

/**
 * How many of the entries recorded in the claim row `c` of `q`'s claims still hold their
 * capacity. Each is probed by id (a scalar subquery: an EXISTS was planned as a semi-join that
 * read every open entry), so a count costs what the row holds, not the backlog.
 */
export const entriesHeld = (t: Tables, q: Limits, c: string) =>
  `(SELECT count(*) FROM unnest(${c}.entries, ${c}.generations) u(id, generation) WHERE coalesce((
   SELECT true FROM ${t(q.queue)} e
    WHERE e.id = u.id AND e.claim_generation = u.generation AND e.${q.settled} IS NULL AND e.dead_at IS NULL
      AND e.claimed_until > now()), false))`

/**
 * An upper bound of what the key `key` (SQL) of `q` has in flight: its claim rows' `taken`; with
 * `slot` (SQL), of that capacity slot's rows only.
 */
export const takenBy = (t: Tables, q: Limits, key: string, slot?: string) =>
  `coalesce((SELECT sum(c.taken) FROM ${t(q.claims)} c WHERE c.${q.key} = ${key}${
    slot === undefined ? "" : ` AND c.slot = ${slot}`
  }), 0)`

/**
 * The advisory lock of slot `slot` of the key `key` (both SQL) of `q`: the two-key form over a
 * hash of the claims table and the key. Two keys whose hashes collide share slots, which costs
 * waiting, never a count.
 */
export const slotLock = (t: Tables, q: Limits, key: string, slot: string) =>
  `hashtext('${t(q.claims)}:' || ${key}), ${slot}`

/** Exactly what the key `key` (SQL) of `q` has in flight: every entry of its claim rows probed. */
export const heldBy = (t: Tables, q: Limits, key: string) =>
  `(SELECT coalesce(sum(${entriesHeld(t, q, "c")}), 0)::int FROM ${t(q.claims)} c WHERE c.${q.key} = ${key})`
