/**
 * Version 15, released: never edit it (a test holds its text); add the next version instead.
 *
 * Dedup keys (`Outbox.enqueue(..., { dedupKey, dedupMode })`): at most one open message per
 * (topic, dedup key), held by a unique partial index (an index probe at any backlog, never an
 * advisory lock or a scan). A message leaves the index when it is projected or dead; one being
 * delivered gives its key up to a replacing enqueue (its column set to null), so the new
 * message waits behind it. The columns a claim writes are not in the index: claims stay HOT.
 *
 * Building the index reads the outbox once (no row has a key yet): enqueues wait for it.
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 15,
  name: "outbox dedup keys",
  statements: (t) => [
    `ALTER TABLE ${t("outbox")} ADD COLUMN dedup_key text`,
    `CREATE UNIQUE INDEX outbox_dedup_key_idx ON ${t("outbox")} (topic, dedup_key)
       WHERE dedup_key IS NOT NULL AND projected_at IS NULL AND dead_at IS NULL`
  ]
}
