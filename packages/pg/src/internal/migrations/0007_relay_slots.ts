/**
 * Version 7: the relays' replication slots (`OutboxLog`): each slot's topics, and whether the
 * messages that were open when it was made (or when its topics changed, or after it lost its
 * WAL) have been published from the table yet. Kept in the database, not in the process that
 * made the slot, so that a relay that dies during that sweep, or a relay started later with
 * more topics, still publishes them.
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 7,
  name: "relay slots",
  statements: (t) => [
    `CREATE TABLE ${t("relay_slots")} (
      slot text PRIMARY KEY,
      topics text[] NOT NULL,
      swept boolean NOT NULL DEFAULT false,
      created_at timestamptz NOT NULL DEFAULT now(),
      swept_at timestamptz
    )`
  ]
}
