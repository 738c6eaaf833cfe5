/**
 * Version 9, released: never edit it (a test holds its text); add the next version instead.
 *
 * `failures`: the history of a row's failed deliveries, newest last, at most the last ten —
 * each one's attempt, worker, time and error (its first 500 characters), so an operator sees
 * every attempt's error, not only the last one. Written by the release of a failed delivery
 * only (a delivery that succeeds writes nothing more), on the row itself: no other table to
 * keep, purge or index, and the update stays in place (HOT) like the release it is part of.
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 9,
  name: "failure history",
  statements: (t) => [
    `ALTER TABLE ${t("outbox")} ADD COLUMN failures jsonb`,
    `ALTER TABLE ${t("inbox")} ADD COLUMN failures jsonb`
  ]
}
