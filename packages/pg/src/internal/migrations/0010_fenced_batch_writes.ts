/**
 * Version 10, released: never edit it (a test holds its text); add the next version instead.
 *
 * A worker's fenced batch writes as functions, one per queue and write: complete many
 * (`<queue>_complete_many`), extend many leases (`<queue>_renew_many`), give many back
 * (`<queue>_give_back_many`). Each takes the rows' ids and their fences (a jsonb map of id to
 * `[worker, generation]`) and returns the ids it changed.
 *
 * Why functions: these writes go out as one statement with the substrate's settings (lock
 * timeout, commit mode) applied by a CTE of that statement. An `UPDATE` written in the
 * statement itself takes its table lock when the statement is planned, before the CTE runs,
 * so a table lock held by DDL (`ALTER TABLE`, `LOCK TABLE`) was waited for without bound. A
 * function's statements are planned and locked when they run, after the settings: the lock
 * timeout bounds every wait, as the claim functions' own already did.
 */
import type { Migration } from "../../Migrations.js"

export interface QueueTable {
  readonly name: "outbox" | "inbox"
  readonly done: "projected_at" | "processed_at"
}

const QUEUES: ReadonlyArray<QueueTable> = [
  { name: "outbox", done: "projected_at" },
  { name: "inbox", done: "processed_at" }
]

// The rows of $1 each still held by its own fence in $2: primary-key probes, a jsonb lookup
// per row (never a join of the claims, which the planner turned into a nested loop).
export const fenced = (queue: QueueTable) =>
  `q.id = ANY(p_ids) AND p_fences -> q.id::text = jsonb_build_array(q.claimed_by, q.claim_generation)
     AND q.claimed_until IS NOT NULL AND q.${queue.done} IS NULL AND q.dead_at IS NULL`

const batchWrite = (
  t: (table: string) => string,
  queue: QueueTable,
  name: string,
  extraArguments: string,
  set: string
) =>
  `CREATE FUNCTION ${t(`${queue.name}_${name}`)}(p_ids bigint[], p_fences jsonb${extraArguments})
  RETURNS SETOF text
  LANGUAGE plpgsql
AS $write$
BEGIN
RETURN QUERY
UPDATE ${t(queue.name)} q SET ${set}
 WHERE ${fenced(queue)}
RETURNING q.id::text;
END
$write$`

export const migration: Migration = {
  version: 10,
  name: "fenced batch writes",
  statements: (t) =>
    QUEUES.flatMap((queue) => [
      batchWrite(t, queue, "complete_many", "", `${queue.done} = now(), claimed_until = NULL, last_error = NULL`),
      batchWrite(
        t,
        queue,
        "renew_many",
        ", p_lease_seconds double precision",
        "claimed_until = now() + make_interval(secs => p_lease_seconds)"
      ),
      batchWrite(t, queue, "give_back_many", "", "claimed_until = NULL")
    ])
}
