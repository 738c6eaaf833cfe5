/**
 * Version 16, released: never edit it (a test holds its text); add the next version instead.
 *
 * Cancellation (`OutboxAdmin.cancel`, `InboxAdmin.cancel`): a state of its own, `cancelled`,
 * for a message an operator or the application called off — waiting or being delivered. A
 * cancelled row is also dead (`dead_at` set): every claim, mark, release and renewal already
 * refuses a dead row, so a holder's late write is fenced out and its ordering key moves on,
 * and nothing of the claim (migration 12) changes. `cancelled_at` tells it from a dead letter;
 * `cancelled_by` says who.
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 16,
  name: "cancellation",
  statements: (t) =>
    (["outbox", "inbox"] as const).map((queue) =>
      `ALTER TABLE ${t(queue)} ADD COLUMN cancelled_at timestamptz, ADD COLUMN cancelled_by text`
    )
}
