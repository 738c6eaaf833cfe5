/**
 * A limited queue's capacity as its claims record it (migrations 26 and 27): one row per claim
 * (and group) in `flow_claims` / `inbox_flow_claims` with the entries it took and their
 * generations, spread over capacity slots. An entry still holds its capacity while it is open,
 * at the generation it was claimed at, its lease running; each is probed by id (a scalar
 * subquery: an EXISTS was planned as a semi-join over the whole queue).
 */
import type { Tables } from "./limits.js"

/** Share of a limit one slot holds at most, and the most slots a limit has. */
const SLOT_SIZE = 16
const MAX_SLOTS = 8

/** How many slots a limit of `cap` (SQL) has. */
export const slotCount = (cap: string) => `least(${MAX_SLOTS}, greatest(1, ${cap} / ${SLOT_SIZE}))`

/** How many of the entries recorded in the claim row `c` meet `isHeld` (over `u.id`, `u.generation`). */
const entriesHeld = (c: string, isHeld: string) =>
  `(SELECT count(*) FROM unnest(${c}.entries, ${c}.generations) u(id, generation) WHERE ${isHeld})`

/** How many of the outbox messages of the claim row `c` (of `flow_claims`) still hold their capacity. */
export const messagesHeld = (t: Tables, c: string) =>
  entriesHeld(
    c,
    `coalesce((
   SELECT true FROM ${t("outbox")} o
    WHERE o.id = u.id AND o.claim_generation = u.generation AND o.projected_at IS NULL AND o.dead_at IS NULL
      AND o.claimed_until > now()), false)`
  )

/** How many of the inbox entries of the claim row `c` (of `inbox_flow_claims`) still hold their capacity. */
export const entriesHeldOfInbox = (t: Tables, c: string) =>
  entriesHeld(
    c,
    `coalesce((
       SELECT true FROM ${t("inbox")} i
        WHERE i.id = u.id AND i.claim_generation = u.generation AND i.processed_at IS NULL
          AND i.dead_at IS NULL AND i.claimed_until > now()), false)`
  )

/** An upper bound of what the topic `l` (a row of `flow_limits`) has in flight: its claim rows' `taken`. */
export const takenBy = (t: Tables, l: string) =>
  `coalesce((SELECT sum(c.taken) FROM ${t("flow_claims")} c WHERE c.topic = ${l}.topic), 0)`
