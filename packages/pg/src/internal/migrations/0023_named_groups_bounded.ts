/**
 * Version 23, released: never edit it (a test holds its text); add the next version instead.
 *
 * The limited claim finds a topic's named groups through the group index's bounds. Since
 * version 17 it walked the groups of its topics (a skip scan: the first group, then the next
 * after it, ...) from `group_key <> ''`, a condition no index bounds: to find the first named
 * group the scan read every open message of the topic without a group. A topic with a limit of
 * 1,000 and 20,000 open messages, none grouped: 16.8 ms of a 121 ms claim (EXPLAIN ANALYZE),
 * every claim, growing with the backlog. Now the walk starts at `group_key > ''`, the same rows
 * ('' sorts before every other text in every collation), which the index bounds: the messages
 * without a group are skipped in one descent.
 *
 * The function keeps its signature: processes of every release since version 12 call it alike.
 */
import type { Migration } from "../../Migrations.js"
import type { LaterClaim } from "./0017_flow_limits.js"
import { claimWithRates } from "./0018_rate_limits.js"
import { claimOf22 } from "./0022_prune_by_id.js"

/** What the claim changes up to this version. */
export const claimOf23 = (t: (table: string) => string): LaterClaim => ({ ...claimOf22(t), named: "o.group_key > ''" })

export const migration: Migration = {
  version: 23,
  name: "the limited claim finds named groups through the index's bounds",
  statements: (t) => [claimWithRates(t, claimOf23(t))]
}
