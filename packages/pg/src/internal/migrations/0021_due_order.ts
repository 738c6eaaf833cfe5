/**
 * Version 21, released: never edit it (a test holds its text); add the next version instead.
 *
 * Priority with a bound on waiting: the outbox claim takes messages in due order. A message's
 * due time (`due_at`) is written by its enqueue: when it becomes ready (now, or after its
 * delay) plus how long it may wait behind later messages (`maxWait`, zero by default). The
 * claim takes the earliest due first (ties: id), so an urgent message (no wait) goes before a
 * bulk one (an hour's wait) enqueued before it, and no message is ever passed over by one that
 * became ready more than its wait after it: never starved.
 *
 * Every open message is in one index in that order, (due_at, id), which replaces the open
 * index in id order (`outbox_open_idx`); the group index of version 17 becomes (topic, group,
 * due_at, id), so a limited topic's group offers its messages in due order too (fair share
 * still chooses between groups). An enqueue writes as many index entries as before. The due
 * time is written once: a retry, a lease running out, a give-back, a redrive or a replay
 * leave it, so a message that comes back keeps its place (as it kept its id's place before),
 * and those updates stay in place (HOT) — `available_at` is still in no index.
 *
 * The rows already there read a due time of minus infinity (a constant default, stored in
 * the catalog: the table is not rewritten): the open backlog goes first, in id order, as it
 * would have. Inserts of processes of the previous release (they write no `due_at`) get now()
 * — their delays are kept by the claim's readiness check, as for any message not yet ready.
 *
 * The claim's ordered reads are index scans whatever the statistics say: sorts and JIT are
 * off in the claim function (`dueOrder`, below).
 *
 * Keyed heads and version 8's window (a keyed head is taken only among the first 1,000 ready
 * rows, in claim order: the probes of the key index stay bounded however large a blocked
 * backlog grows). In id order a key's head always came before its later messages, so the
 * window always held what it could take or what waited on a message in flight. In due order a
 * key's later message could be due before its head, and a thousand such in front of every
 * head would fill the window for good (found by a review). So the enqueue writes a keyed
 * message's due time no earlier than its key's last open message's (Outbox.enqueue), and,
 * for what that cannot see (two enqueues of one key racing, a redriven or replayed message
 * keeping its old due time, inserts of the previous release), one claim in 16 looks past the
 * window: a head stuck behind it is reached within a few claims, and the probes stay bounded
 * on average (a sixteenth of a blocked backlog per claim).
 *
 * Building the two indexes reads the outbox once each; the column added in the same
 * transaction holds the table's exclusive lock until then, so every statement on the outbox
 * waits for the build.
 */
import type { Migration } from "../../Migrations.js"
import type { ClaimOrder } from "./0012_keyed_runs.js"
import type { LaterClaim } from "./0017_flow_limits.js"
import { claimWithRates } from "./0018_rate_limits.js"
import { claimOf20 } from "./0020_claim_by_id.js"

/**
 * Due order: the earliest due time first, then id. The claim's ordered reads must be index
 * scans whatever the statistics say: under a generic plan the planner guesses a few hundred
 * ready rows where there are 500,000 and, once due times stop following the heap's order (waits
 * mixed in), it would read them all and sort them, every claim. So sorts are off in the claim
 * function (a sort of the claim's own few rows, which nothing else can give, is still made),
 * and so is JIT: sorts off cost a plan 10^10, which would compile every claim.
 */
export const dueOrder: ClaimOrder = {
  by: "c.due_at, c.id",
  columns: ", c.due_at",
  settings: "\n  SET enable_sort = off\n  SET jit = off",
  // The window in due order; one claim in 16 (an InitPlan: once per claim) looks past it.
  window: (first) =>
    `((SELECT random()) < 0.0625 OR (c.due_at, c.id) <= (SELECT w.due_at, w.id FROM (
         ${first("w.due_at, w.id", "w.due_at, w.id")}) w ORDER BY w.due_at DESC, w.id DESC LIMIT 1))`
}

/** What the claim changes up to this version. */
export const claimOf21 = (t: (table: string) => string): LaterClaim => ({ ...claimOf20(t), order: dueOrder })

export const migration: Migration = {
  version: 21,
  name: "due order (priority with a bound on waiting) in the outbox claim",
  statements: (t) => {
    const open = "WHERE projected_at IS NULL AND dead_at IS NULL"
    return [
      `ALTER TABLE ${t("outbox")} ADD COLUMN due_at timestamptz NOT NULL DEFAULT '-infinity'`,
      `ALTER TABLE ${t("outbox")} ALTER COLUMN due_at SET DEFAULT now()`,
      `CREATE INDEX outbox_open_due_idx ON ${t("outbox")} (due_at, id) ${open}`,
      `DROP INDEX ${t("outbox_open_idx")}`,
      `CREATE INDEX outbox_open_group_due_idx ON ${t("outbox")} (topic, group_key, due_at, id) ${open}`,
      `DROP INDEX ${t("outbox_open_group_idx")}`,
      claimWithRates(t, claimOf21(t))
    ]
  }
}
