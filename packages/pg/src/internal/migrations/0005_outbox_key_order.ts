/** Version 5, released: never edit it (a test holds its text); add the next version instead. */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 5,
  name: "outbox per-key order",
  statements: (t) => [
    // A claim hands out a keyed message only when no earlier message of its key is open;
    // this index answers that question in one probe.
    `CREATE INDEX outbox_open_key_idx ON ${t("outbox")} (ordering_key, id)
         WHERE ordering_key IS NOT NULL AND projected_at IS NULL AND dead_at IS NULL`
  ]
}
