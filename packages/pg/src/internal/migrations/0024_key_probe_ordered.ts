/**
 * Version 24, released: never edit it (a test holds its text); add the next version instead.
 *
 * The claim's probe for an open message ahead of a keyed row in its key goes through the key
 * index. Since version 5 it was a NOT EXISTS, which any index of open messages can answer;
 * under the claim's generic plan PostgreSQL answered it with the group index (topic, group,
 * due time, id), bounded by the id only, filtering the other keys' messages out one by one: a
 * claim of 500 over a keyed backlog of 10,000 read 24 rows per probe, 1,000 probes, 60 of its
 * 85 ms (EXPLAIN ANALYZE), and more where a key's earlier message stands far back. Now the probe
 * asks for the first such message in the key index's order (`ORDER BY ordering_key, id LIMIT
 * 1`), which only that index gives without a sort: one descent per probe.
 *
 * The function keeps its signature: processes of every release since version 12 call it alike.
 */
import type { Migration } from "../../Migrations.js"
import { earlierInKey } from "./0012_keyed_runs.js"
import type { LaterClaim } from "./0017_flow_limits.js"
import { claimWithRates } from "./0018_rate_limits.js"
import { claimOf23 } from "./0023_named_groups_bounded.js"

/** That an open message of `c`'s key stands before it: the first one, in the key index's order. */
export const aheadByKeyIndex = (t: (table: string) => string) => (c: string) =>
  `coalesce((
         SELECT true FROM ${t("outbox")} e
          WHERE ${earlierInKey(t, c)}
          ORDER BY e.ordering_key, e.id LIMIT 1), false)`

/** What the claim changes up to this version. */
export const claimOf24 = (t: (table: string) => string): LaterClaim => ({ ...claimOf23(t), ahead: aheadByKeyIndex(t) })

export const migration: Migration = {
  version: 24,
  name: "the claim probes a key's earlier messages through the key index",
  statements: (t) => [claimWithRates(t, claimOf24(t))]
}
