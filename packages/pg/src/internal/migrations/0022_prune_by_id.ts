/**
 * Version 22, released: never edit it (a test holds its text); add the next version instead.
 *
 * The limited claim prunes the capacities no longer taken by probing each one's message by id.
 * Since version 17 every claim of a limited topic first drops the rows of `flow_leases` whose
 * message was settled, given back, cancelled or ran out of lease, with a NOT EXISTS over the
 * outbox; under the claim's generic plan PostgreSQL ran that as an anti-join that read every
 * open message of the outbox (EXPLAIN ANALYZE, a topic with a limit of 1,000 and 20,000
 * messages: 19,500 rows read and 93,625 compared, 44 ms of a 45 ms claim). That is most of
 * why a limit that never binds halved a no-op drain. Each capacity row now looks up its own
 * message through the primary key (a scalar subquery, which the planner keeps as one probe
 * per row): the prune costs the capacities held, not the backlog.
 *
 * The function keeps its signature: processes of every release since version 12 call it alike.
 */
import type { Migration } from "../../Migrations.js"
import { capacityHeld, type LaterClaim } from "./0017_flow_limits.js"
import { claimWithRates } from "./0018_rate_limits.js"
import { claimOf21 } from "./0021_due_order.js"

/** That the capacity row `f` is still taken: its message, found by id, open, same generation, lease running. */
export const heldById = (t: (table: string) => string) => (f: string) =>
  `coalesce((
   SELECT true FROM ${t("outbox")} o
    WHERE ${capacityHeld(t, f)}), false)`

/** What the claim changes up to this version. */
export const claimOf22 = (t: (table: string) => string): LaterClaim => ({ ...claimOf21(t), held: heldById(t) })

export const migration: Migration = {
  version: 22,
  name: "the limited claim prunes its capacities by id",
  statements: (t) => [claimWithRates(t, claimOf22(t))]
}
