/**
 * The fenced batch writes of a leased queue (the outbox and the stored inbox): complete, renew,
 * give back, and give back unstarted (its attempt taken back), each one statement over the rows
 * named, each row written only while its claim token (worker, generation) still holds it.
 * `p_fences` maps a row's id to `[worker, generation]`; the ids written are returned. An outbox
 * message completed leaves the open table for the history in the same statement.
 */
import { CONSUMER_LIMITS, renewableInTime, type Tables, TOPIC_LIMITS } from "../flow/limits.js"
import { moveText } from "../queue/moves.js"

interface Queue {
  readonly name: "outbox" | "inbox"
  /** The column that marks a row done. */
  readonly done: "projected_at" | "processed_at"
}

const QUEUES: ReadonlyArray<Queue> = [{ name: "outbox", done: "projected_at" }, { name: "inbox", done: "processed_at" }]

const fenced = "q.id = ANY(p_ids) AND p_fences -> q.id::text = jsonb_build_array(q.claimed_by, q.claim_generation)"

const write = (t: Tables, queue: Queue, name: string, args: string, set: string, also = "") =>
  `CREATE OR REPLACE FUNCTION ${t(`${queue.name}_${name}`)}(p_ids bigint[], p_fences jsonb${args})
  RETURNS SETOF text
  LANGUAGE plpgsql
AS $write$
BEGIN
RETURN QUERY
UPDATE ${t(queue.name)} q SET ${set}
 WHERE ${fenced}
   AND q.claimed_until IS NOT NULL AND q.${queue.done} IS NULL AND q.dead_at IS NULL${also}
RETURNING q.id::text;
END
$write$`

/** The outbox's completion: the fenced rows move to the history, delivered now. */
const outboxCompleteMany = (t: Tables) =>
  `CREATE OR REPLACE FUNCTION ${t("outbox_complete_many")}(p_ids bigint[], p_fences jsonb)
  RETURNS SETOF text
  LANGUAGE plpgsql
AS $write$
BEGIN
RETURN QUERY
${
    moveText(t, {
      from: "outbox",
      to: "outbox_history",
      where: `${fenced} AND q.claimed_until IS NOT NULL`,
      changes: { projected_at: "now()", claimed_until: "NULL", last_error: "NULL" },
      returning: "id::text"
    })
  };
END
$write$`

export const batchWrites = (t: Tables): ReadonlyArray<string> =>
  QUEUES.flatMap((queue) => [
    queue.name === "outbox"
      ? outboxCompleteMany(t)
      : write(t, queue, "complete_many", "", `${queue.done} = now(), claimed_until = NULL, last_error = NULL`),
    // A lease that ran out on a limited queue stays out: its capacity may be another claim's.
    write(
      t,
      queue,
      "renew_many",
      ", p_lease_seconds double precision",
      "claimed_until = clock_timestamp() + make_interval(secs => p_lease_seconds)",
      ` AND ${renewableInTime(t, "q", "p_lease_seconds", queue.name === "outbox" ? TOPIC_LIMITS : CONSUMER_LIMITS)}`
    ),
    write(t, queue, "give_back_many", "", "claimed_until = NULL"),
    write(
      t,
      queue,
      "give_back_unstarted_many",
      "",
      "claimed_until = NULL, attempt_count = greatest(q.attempt_count - 1, 0)"
    )
  ])
