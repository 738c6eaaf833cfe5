/**
 * Version 7, released: never edit it (a test holds its text); add the next version instead.
 * Each queue's claim as a PL/pgSQL function. Its query is also exported on its own
 * (`outboxClaimQuery`, `inboxClaimQuery`): what `explainClaim` prepares and explains, so the
 * plan shown is the one the function runs.
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 7,
  name: "claim functions",
  statements: (t) => [claimFunction(t, OUTBOX), claimFunction(t, INBOX)]
}

interface ClaimSpec {
  readonly name: string
  readonly table: string
  readonly done: string
  readonly filterType: string
  readonly filter: (alias: string, table: string) => string
  readonly returns: string
  readonly returning: string
}

const OUTBOX: ClaimSpec = {
  name: "outbox_claim",
  table: "outbox",
  done: "projected_at",
  filterType: "text[]",
  // $4: the topics, or NULL for all. Per-key order: a keyed row is claimable only while
  // no earlier row of its key is open, and only among the first 1,000 claimable rows
  // (evaluated once, as an InitPlan, and only when a keyed row is met).
  filter: (c, table) =>
    `($4 IS NULL OR ${c}.topic = ANY($4))
           AND (${c}.ordering_key IS NULL OR (
             ${c}.id <= (SELECT max(w.id) FROM (
               SELECT w.id FROM ${table} w
                WHERE w.projected_at IS NULL AND w.dead_at IS NULL AND w.available_at <= now()
                  AND (w.claimed_until IS NULL OR w.claimed_until <= now()) AND ($4 IS NULL OR w.topic = ANY($4))
                ORDER BY w.id LIMIT 1000) w)
             AND NOT EXISTS (
               SELECT 1 FROM ${table} e
                WHERE e.ordering_key = ${c}.ordering_key AND e.ordering_key IS NOT NULL AND e.id < ${c}.id
                  AND e.projected_at IS NULL AND e.dead_at IS NULL)))`,
  returns: "topic text, ordering_key text, payload jsonb, headers jsonb, created_at text",
  returning: "q.topic, q.ordering_key, q.payload, q.headers, q.created_at::text"
}

const INBOX: ClaimSpec = {
  name: "inbox_claim",
  table: "inbox",
  done: "processed_at",
  filterType: "text",
  // $4: the consumer.
  filter: (c) => `${c}.consumer = $4`,
  returns: "consumer text, message_id text, payload jsonb, headers jsonb, received_at text",
  returning: "q.consumer, q.message_id, q.payload, q.headers, q.received_at::text"
}

/**
 * A queue's claim as a function (version 7). PL/pgSQL keeps the plan of its query for the
 * session, and `force_generic_plan` makes it one plan for all arguments: a claim is neither
 * parsed nor planned per call, which on a small table was a third of its time. The query
 * is written so that its generic plan is the right one at any table size: rows are reached
 * by primary key (`id = ANY(ARRAY(...))`), never by a join whose strategy depends on the
 * batch's estimated share of the table. Arguments: $1 worker, $2 limit, $3 lease in
 * seconds, $4 the queue's filter. A row whose final attempt's lease expired (its worker
 * died) goes to the dead letters here, reported `exhausted`, instead of being handed out.
 */
const claimFunction = (t: (table: string) => string, spec: ClaimSpec) =>
  `CREATE FUNCTION ${t(spec.name)}(text, integer, double precision, ${spec.filterType})
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean, ${spec.returns})
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
BEGIN
RETURN QUERY
${claimQuery(t, spec)};
END
$claim$`

/** The query of a claim function, with its `$n` arguments. */
const claimQuery = (t: (table: string) => string, spec: ClaimSpec) => {
  const table = t(spec.table)
  const exhausted = "q.attempt_count >= q.max_attempts"
  return `WITH ready AS (
  SELECT c.id FROM ${table} c
   WHERE c.${spec.done} IS NULL AND c.dead_at IS NULL AND c.available_at <= now()
     AND (c.claimed_until IS NULL OR c.claimed_until <= now())
     AND ${spec.filter("c", table)}
   ORDER BY c.id
   LIMIT $2
   FOR UPDATE SKIP LOCKED)
UPDATE ${table} q SET
  claimed_by = CASE WHEN ${exhausted} THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN ${exhausted} THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN ${exhausted} THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN ${exhausted} THEN q.attempt_count ELSE q.attempt_count + 1 END,
  dead_at = CASE WHEN ${exhausted} THEN now() END,
  last_error = CASE WHEN ${exhausted} THEN concat_ws('; ', q.last_error, 'lease expired on the final attempt')
                    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT r.id FROM ready r))
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL, ${spec.returning}`
}

/** The outbox claim function's query: $1 worker, $2 limit, $3 lease seconds, $4 topics (text[] or NULL). */
export const outboxClaimQuery = (t: (table: string) => string): string => claimQuery(t, OUTBOX)
/** The inbox claim function's query: $1 worker, $2 limit, $3 lease seconds, $4 consumer. */
export const inboxClaimQuery = (t: (table: string) => string): string => claimQuery(t, INBOX)
