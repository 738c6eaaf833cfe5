/**
 * Version 20, released: never edit it (a test holds its text); add the next version instead.
 *
 * The outbox claim's last step updates its rows by id. Since version 12 it joined the outbox
 * with the claim's chosen rows (`FROM chosen c WHERE q.id = c.id`), and under its generic plan
 * PostgreSQL could do that join from the wrong side: read every open message through the open
 * index and look each one up in the chosen rows. A claim of 500 messages of a keyed backlog of
 * 10,000 spent 2.4 s of its 2.4 s there (EXPLAIN ANALYZE: 10,000 rows read, the chosen rows
 * scanned 10,000 times); beside a loaded machine such claims took up to 15 s, and a claim that
 * slow returns leases already partly spent. The plan is made once per connection, so one made
 * while the statistics were off stays for the connection's life. Now the rows are named by an
 * array of ids (an index probe of the primary key each), as the inbox claim and the limited
 * claim of version 17 already did; a key's head (position 0, which alone counts a lease that
 * ran out) is told apart by a second array.
 *
 * The function keeps its signature: processes of every release since version 12 call it alike.
 */
import type { Migration } from "../../Migrations.js"
import { claimUpdate } from "./0012_keyed_runs.js"
import type { LaterClaim } from "./0017_flow_limits.js"
import { claimWithRates } from "./0018_rate_limits.js"

/** The claim's last step over `chosen`, its rows probed by id. */
export const claimUpdateById = (t: (table: string) => string) =>
  claimUpdate(t, {
    from: "",
    where: "q.id = ANY(ARRAY(SELECT c.id FROM chosen c))",
    position: "CASE WHEN q.id = ANY(ARRAY(SELECT c.id FROM chosen c WHERE c.position = 0)) THEN 0 ELSE 1 END"
  })

/** What this version's claim changes; each later version adds its own to it. */
export const claimOf20 = (t: (table: string) => string): LaterClaim => ({ update: claimUpdateById(t) })

export const migration: Migration = {
  version: 20,
  name: "the outbox claim updates its rows by id",
  statements: (t) => [claimWithRates(t, claimOf20(t))]
}
