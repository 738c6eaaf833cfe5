/** Version 6, released: never edit it (a test holds its text); add the next version instead. */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 6,
  name: "room for in-place claims",
  statements: (t) => [
    // A claim rewrites its rows without touching an indexed column: with room left on the
    // row's page PostgreSQL updates it in place (HOT) and writes no index entry, about a
    // quarter of the server's work per delivered message. Half of every page written
    // from now on is left free for that.
    `ALTER TABLE ${t("outbox")} SET (fillfactor = 50)`,
    `ALTER TABLE ${t("inbox")} SET (fillfactor = 50)`
  ]
}
