/**
 * Version 8, released: never edit it (a test holds its text); add the next version instead.
 *
 * - Failed deliveries and lost leases are counted apart (`failure_count`, `lease_expiries`):
 *   `max_attempts` bounds failures only, a separate bound (the claim's fifth argument) bounds
 *   leases that ran out — a worker that died or stalled — so a message delivered under a lease
 *   lost to a slow machine is never killed for it. The claim functions take that bound, skip
 *   paused topics, and return timestamps as ISO-8601 UTC.
 * - `paused_topics`: a durable pause flag per outbox topic that every claim honours.
 * - `runtime_roles`: the roles `grantRuntimeAccess` granted, re-granted by every migration.
 * - `mutation_lookup`: the ledger's timeouts, advisory lock and record read in one
 *   parameterized call. Each statement of a volatile PL/pgSQL function takes its own snapshot,
 *   so the read sees what the lock's previous holder committed.
 * - Exact responses: `response_body` keeps the bytes a record replays (JSON text in the key
 *   order it was given, or an HTTP body), `response_meta` what goes with raw bytes (an HTTP
 *   status and headers). Records made before keep their `jsonb` response.
 *
 * Its claim queries are exported on their own (`outboxClaimQuery`, `inboxClaimQuery`): what
 * `explainClaim` prepares and explains, so the plan shown is the one the functions run.
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 8,
  name: "lease expiries, paused topics, runtime roles, ledger lookup, exact responses",
  statements: (t) => [
    `ALTER TABLE ${t("outbox")} ADD COLUMN failure_count integer NOT NULL DEFAULT 0,
       ADD COLUMN lease_expiries integer NOT NULL DEFAULT 0`,
    `ALTER TABLE ${t("inbox")} ADD COLUMN failure_count integer NOT NULL DEFAULT 0,
       ADD COLUMN lease_expiries integer NOT NULL DEFAULT 0`,
    `ALTER TABLE ${t("mutation_records")} ALTER COLUMN response DROP NOT NULL,
       ADD COLUMN response_body bytea, ADD COLUMN response_meta jsonb,
       ADD CONSTRAINT mutation_records_response_check CHECK (response IS NOT NULL OR response_body IS NOT NULL)`,
    `CREATE TABLE ${t("paused_topics")} (
      topic text NOT NULL,
      paused_at timestamptz NOT NULL DEFAULT now(),
      paused_by text,
      CONSTRAINT paused_topics_pkey PRIMARY KEY (topic)
    )`,
    `CREATE TABLE ${t("runtime_roles")} (
      role text NOT NULL,
      granted_at timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT runtime_roles_pkey PRIMARY KEY (role)
    )`,
    claimFunction(t, OUTBOX),
    claimFunction(t, INBOX),
    lookupFunction(t)
  ]
}

interface ClaimSpec {
  readonly name: string
  readonly table: string
  readonly done: string
  readonly filterType: string
  /** The queue's filter on candidate rows (and on the per-key window, for the outbox). */
  readonly filter: (alias: string, t: (table: string) => string) => string
  readonly returns: string
  readonly returning: string
}

const iso = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`

const OUTBOX: ClaimSpec = {
  name: "outbox_claim",
  table: "outbox",
  done: "projected_at",
  filterType: "text[]",
  // $4: the topics, or NULL for all; paused topics never (their list is read once per claim,
  // an InitPlan). Per-key order: a keyed row is claimable only while no earlier row of its key
  // is open, and only among the first 1,000 claimable rows.
  filter: (c, t) => {
    const table = t("outbox")
    const paused = `ARRAY(SELECT p.topic FROM ${t("paused_topics")} p)`
    return `($4 IS NULL OR ${c}.topic = ANY($4)) AND ${c}.topic <> ALL(${paused})
     AND (${c}.ordering_key IS NULL OR (
       ${c}.id <= (SELECT max(w.id) FROM (
         SELECT w.id FROM ${table} w
          WHERE w.projected_at IS NULL AND w.dead_at IS NULL AND w.available_at <= now()
            AND (w.claimed_until IS NULL OR w.claimed_until <= now())
            AND ($4 IS NULL OR w.topic = ANY($4)) AND w.topic <> ALL(${paused})
          ORDER BY w.id LIMIT 1000) w)
       AND NOT EXISTS (
         SELECT 1 FROM ${table} e
          WHERE e.ordering_key = ${c}.ordering_key AND e.ordering_key IS NOT NULL AND e.id < ${c}.id
            AND e.projected_at IS NULL AND e.dead_at IS NULL)))`
  },
  returns: "topic text, ordering_key text, payload jsonb, headers jsonb, created_at text",
  returning: `q.topic, q.ordering_key, q.payload, q.headers, ${iso("q.created_at")}`
}

const INBOX: ClaimSpec = {
  name: "inbox_claim",
  table: "inbox",
  done: "processed_at",
  filterType: "text",
  // $4: the consumer.
  filter: (c) => `${c}.consumer = $4`,
  returns: "consumer text, message_id text, payload jsonb, headers jsonb, received_at text",
  returning: `q.consumer, q.message_id, q.payload, q.headers, ${iso("q.received_at")}`
}

/**
 * A queue's claim. Arguments: $1 worker, $2 limit, $3 lease in seconds, $4 the queue's filter,
 * $5 the most leases a row may lose. A candidate whose previous lease ran out unsettled
 * (`claimed_until` still set) has lost one more; at the bound it goes to the dead letters
 * here, reported `exhausted`, with the reason in `last_error`, instead of being handed out.
 */
const claimFunction = (t: (table: string) => string, spec: ClaimSpec) =>
  `CREATE FUNCTION ${t(spec.name)}(text, integer, double precision, ${spec.filterType}, integer)
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

const claimQuery = (t: (table: string) => string, spec: ClaimSpec, limit = "$2") => {
  const table = t(spec.table)
  const expired = "q.claimed_until IS NOT NULL"
  const exhausted = `${expired} AND q.lease_expiries + 1 >= $5`
  return `WITH ready AS (
  SELECT c.id FROM ${table} c
   WHERE c.${spec.done} IS NULL AND c.dead_at IS NULL AND c.available_at <= now()
     AND (c.claimed_until IS NULL OR c.claimed_until <= now())
     AND ${spec.filter("c", t)}
   ORDER BY c.id
   LIMIT ${limit}
   FOR UPDATE SKIP LOCKED)
UPDATE ${table} q SET
  claimed_by = CASE WHEN ${exhausted} THEN q.claimed_by ELSE $1 END,
  claimed_until = CASE WHEN ${exhausted} THEN NULL ELSE now() + make_interval(secs => $3) END,
  claim_generation = CASE WHEN ${exhausted} THEN q.claim_generation ELSE q.claim_generation + 1 END,
  attempt_count = CASE WHEN ${exhausted} THEN q.attempt_count ELSE q.attempt_count + 1 END,
  lease_expiries = q.lease_expiries + CASE WHEN ${expired} THEN 1 ELSE 0 END,
  dead_at = CASE WHEN ${exhausted} THEN now() END,
  last_error = CASE WHEN ${exhausted}
    THEN concat_ws('; ', q.last_error, format('dead: its lease ran out %s times (a worker died or stalled while delivering it)', q.lease_expiries + 1))
    ELSE q.last_error END
 WHERE q.id = ANY(ARRAY(SELECT r.id FROM ready r))
RETURNING q.id::text, q.claim_generation::text, q.attempt_count, q.dead_at IS NOT NULL, ${spec.returning}`
}

/** The outbox claim's query: $1 worker, $2 limit, $3 lease seconds, $4 topics (text[] or NULL), $5 lease bound. */
export const outboxClaimQuery = (t: (table: string) => string): string => claimQuery(t, OUTBOX)
/**
 * The inbox claim's query: $1 worker, $2 limit, $3 lease seconds, $4 consumer, $5 lease bound.
 * `limit`: how many rows it takes at most (version 25: what the consumer's limits leave).
 */
export const inboxClaimQuery = (t: (table: string) => string, limit?: string): string => claimQuery(t, INBOX, limit)

/**
 * The ledger's first step, one call: set the substrate's timeouts for the transaction (and
 * return the previous values, which a caller's transaction gets back), take the identity's
 * advisory lock (or try it: `p_wait` false), then read the record — `FOR UPDATE` when locked.
 * Always one row: `kind` is NULL when there is no record.
 */
const lookupFunction = (t: (table: string) => string) =>
  `CREATE FUNCTION ${t("mutation_lookup")}(p_subject text, p_operation text, p_key text, p_lock bigint, p_wait boolean,
    p_lock_timeout text, p_statement_timeout text)
  RETURNS TABLE (locked boolean, previous_lock_timeout text, previous_statement_timeout text, kind text,
    eligibility bytea, request_fingerprint bytea, status text, response jsonb, response_body bytea, response_meta jsonb,
    recorded_at text)
  LANGUAGE plpgsql
AS $lookup$
#variable_conflict use_column
DECLARE
  got boolean;
  prev_lock text := current_setting('lock_timeout');
  prev_statement text := current_setting('statement_timeout');
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout, true);
  IF p_statement_timeout IS NOT NULL THEN
    PERFORM set_config('statement_timeout', p_statement_timeout, true);
  END IF;
  IF p_wait THEN
    PERFORM pg_advisory_xact_lock(p_lock);
    got := true;
  ELSE
    got := pg_try_advisory_xact_lock(p_lock);
  END IF;
  IF got THEN
    RETURN QUERY SELECT true, prev_lock, prev_statement, r.kind, r.eligibility, r.request_fingerprint, r.status,
                        r.response, r.response_body, r.response_meta, ${iso("r.created_at")}
      FROM ${t("mutation_records")} r
     WHERE r.subject = p_subject AND r.operation = p_operation AND r.key = p_key
       FOR UPDATE;
  ELSE
    RETURN QUERY SELECT false, prev_lock, prev_statement, r.kind, r.eligibility, r.request_fingerprint, r.status,
                        r.response, r.response_body, r.response_meta, ${iso("r.created_at")}
      FROM ${t("mutation_records")} r
     WHERE r.subject = p_subject AND r.operation = p_operation AND r.key = p_key;
  END IF;
  IF NOT FOUND THEN
    RETURN QUERY SELECT got, prev_lock, prev_statement, NULL::text, NULL::bytea, NULL::bytea, NULL::text, NULL::jsonb,
                        NULL::bytea, NULL::jsonb, NULL::text;
  END IF;
END
$lookup$`
