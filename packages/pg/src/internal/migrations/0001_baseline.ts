/**
 * Version 1, the baseline: the whole schema of the first release, as one readable record. It
 * replaces the 28 steps of the unreleased pre-release numbering (a database built by them is
 * adopted in place, see `internal/adoption.ts` and docs/upgrading.md).
 *
 * Unreleased while `RELEASED_THROUGH` (in `index.ts`) is below 1: it may still change, and its
 * database functions are read from their live rooms (`internal/claim`, `internal/functions`,
 * `internal/flow`). At release its text is frozen here (`npm run schema:freeze`) and its
 * checksum held by a test: from then on it never changes, and a change is the next version.
 */
import type { Migration } from "../../Migrations.js"
import { claimFunctions } from "../claim/index.js"
import { tokensFunction } from "../flow/tokens.js"
import { feedFunctions } from "../functions/feed.js"
import { historyFunctions } from "../functions/history.js"
import { mutationLookup } from "../functions/ledger.js"
import { rateLimiterFunctions } from "../functions/rateLimiter.js"
import { batchWrites } from "../functions/writes.js"

/**
 * A message's columns after its id, one row shape for the open, dead and delivered tables. The
 * last, `feed_position`, is where the message stands in the commit-ordered feed (`Feed`): taken
 * at enqueue, and carried unchanged by every move between the three tables.
 */
const messageColumns = (t: (table: string) => string) =>
  `    topic text NOT NULL,
    ordering_key text,
    payload jsonb NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    available_at timestamptz NOT NULL DEFAULT now(),
    claimed_by text,
    claimed_until timestamptz,
    claim_generation bigint NOT NULL DEFAULT 0,
    attempt_count integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 25,
    projected_at timestamptz,
    dead_at timestamptz,
    last_error text,
    failure_count integer NOT NULL DEFAULT 0,
    lease_expiries integer NOT NULL DEFAULT 0,
    failures jsonb,
    dedup_key text,
    cancelled_at timestamptz,
    cancelled_by text,
    group_key text NOT NULL DEFAULT '',
    due_at timestamptz NOT NULL DEFAULT now(),
    feed_position bigint NOT NULL DEFAULT ${t("feed_position")}()`

const tables = (t: (table: string) => string): ReadonlyArray<string> => [
  // The mutation ledger: one record per (subject, operation, key), its outcome replayed to retries.
  `CREATE TABLE ${t("mutation_records")} (
    subject text NOT NULL,
    operation text NOT NULL,
    key text NOT NULL,
    kind text NOT NULL,
    eligibility bytea NOT NULL,
    request_fingerprint bytea NOT NULL,
    status text NOT NULL,
    response jsonb,
    effect_applied boolean GENERATED ALWAYS AS (status = 'accepted') STORED,
    created_at timestamptz NOT NULL DEFAULT now(),
    response_body bytea,
    response_meta jsonb,
    CONSTRAINT mutation_records_pkey PRIMARY KEY (subject, operation, key),
    CONSTRAINT mutation_records_fingerprint_length CHECK (octet_length(request_fingerprint) = 32),
    CONSTRAINT mutation_records_response_check CHECK (response IS NOT NULL OR response_body IS NOT NULL),
    CONSTRAINT mutation_records_status_check CHECK (status IN ('accepted', 'rejected'))
  )`,
  `CREATE INDEX mutation_records_created_at_idx ON ${t("mutation_records")} (created_at)`,

  // The outbox's open messages: the table every claim scans holds nothing else. A message
  // leaves it in the statement that settles it: delivered into the history, dead or cancelled
  // into the dead letters (both hold the same row). Claimed by id under a lease and fenced by
  // its generation; half of each page is left free so a claim's update stays on the page (HOT).
  `CREATE TABLE ${t("outbox")} (
    id bigint GENERATED ALWAYS AS IDENTITY,
${messageColumns(t)},
    CONSTRAINT outbox_pkey PRIMARY KEY (id),
    CONSTRAINT outbox_open_check CHECK (projected_at IS NULL AND dead_at IS NULL AND cancelled_at IS NULL),
    CONSTRAINT outbox_max_attempts_check CHECK (max_attempts > 0)
  ) WITH (fillfactor = 50)`,
  // The claim's order among open messages: due time (priority with a bound on waiting), then id.
  // (Every row is open: the indexes keep the open condition the claim's statements spell out.)
  `CREATE INDEX outbox_open_due_idx ON ${t("outbox")} (due_at, id) WHERE projected_at IS NULL AND dead_at IS NULL`,
  // A limited topic's claim, group by group.
  `CREATE INDEX outbox_open_group_due_idx ON ${t("outbox")} (topic, group_key, due_at, id)
     WHERE projected_at IS NULL AND dead_at IS NULL`,
  // A key's earlier open messages (per-key order, keyed runs).
  `CREATE INDEX outbox_open_key_idx ON ${t("outbox")} (ordering_key, id)
     WHERE ordering_key IS NOT NULL AND projected_at IS NULL AND dead_at IS NULL`,
  // At most one open message per topic and dedup key.
  `CREATE UNIQUE INDEX outbox_dedup_key_idx ON ${t("outbox")} (topic, dedup_key)
     WHERE dedup_key IS NOT NULL AND projected_at IS NULL AND dead_at IS NULL`,
  // (No index of the feed's here: it cost an enqueue 9 %, one per transaction. A feed reads the
  // few open messages of its topic by the group index above, sorted; the delivered and the
  // dead, which are most of them, by their tables' feed indexes.)
  // Dead and cancelled messages, until an operator redrives, restores or discards them.
  `CREATE TABLE ${t("outbox_dead")} (
    id bigint NOT NULL,
${messageColumns(t)},
    CONSTRAINT outbox_dead_pkey PRIMARY KEY (id),
    CONSTRAINT outbox_dead_check CHECK (dead_at IS NOT NULL AND projected_at IS NULL)
  )`,
  // The feed's read of a topic, in position order (the same on the history).
  `CREATE INDEX outbox_dead_feed_idx ON ${t("outbox_dead")} (topic, feed_position, id)`,
  // Delivered messages, append-only, one partition per UTC day of delivery: retention drops
  // whole days (outbox_history_partitions makes the days ahead; the default partition takes a
  // day nobody made).
  `CREATE TABLE ${t("outbox_history")} (
    id bigint NOT NULL,
${messageColumns(t)},
    CONSTRAINT outbox_history_check CHECK (projected_at IS NOT NULL AND dead_at IS NULL)
  ) PARTITION BY RANGE (projected_at)`,
  `CREATE INDEX outbox_history_id_idx ON ${t("outbox_history")} (id)`,
  `CREATE INDEX outbox_history_feed_idx ON ${t("outbox_history")} (topic, feed_position, id)`,
  `CREATE TABLE ${t("outbox_history_default")} PARTITION OF ${t("outbox_history")} DEFAULT`,
  // Every message, wherever it is: what operators, searches and counts read.
  `CREATE VIEW ${t("outbox_messages")} AS
     SELECT * FROM ${t("outbox")} UNION ALL SELECT * FROM ${t("outbox_dead")}
     UNION ALL SELECT * FROM ${t("outbox_history")}`,

  // The feed's consumers (`Feed`): each one's cursor, the position and id of the last row it
  // read, advanced in the transaction that applied the rows.
  `CREATE TABLE ${t("feed_consumers")} (
    name text NOT NULL,
    topics text[] NOT NULL,
    position bigint NOT NULL,
    last_id bigint NOT NULL,
    read_count bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    read_at timestamptz,
    CONSTRAINT feed_consumers_pkey PRIMARY KEY (name),
    CONSTRAINT feed_consumers_topics_check CHECK (cardinality(topics) > 0)
  )`,

  // The inbox: a receipt per (consumer, message), and in stored mode the entry to process.
  `CREATE TABLE ${t("inbox")} (
    id bigint GENERATED ALWAYS AS IDENTITY,
    consumer text NOT NULL,
    message_id text NOT NULL,
    payload jsonb,
    headers jsonb NOT NULL DEFAULT '{}'::jsonb,
    received_at timestamptz NOT NULL DEFAULT now(),
    available_at timestamptz NOT NULL DEFAULT now(),
    claimed_by text,
    claimed_until timestamptz,
    claim_generation bigint NOT NULL DEFAULT 0,
    attempt_count integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 25,
    processed_at timestamptz,
    dead_at timestamptz,
    last_error text,
    failure_count integer NOT NULL DEFAULT 0,
    lease_expiries integer NOT NULL DEFAULT 0,
    failures jsonb,
    cancelled_at timestamptz,
    cancelled_by text,
    CONSTRAINT inbox_pkey PRIMARY KEY (id),
    CONSTRAINT inbox_receipt_key UNIQUE (consumer, message_id),
    CONSTRAINT inbox_final_state_check CHECK (processed_at IS NULL OR dead_at IS NULL),
    CONSTRAINT inbox_max_attempts_check CHECK (max_attempts > 0)
  ) WITH (fillfactor = 50)`,
  `CREATE INDEX inbox_open_idx ON ${t("inbox")} (consumer, id) WHERE processed_at IS NULL AND dead_at IS NULL`,
  `CREATE INDEX inbox_dead_idx ON ${t("inbox")} (id) WHERE dead_at IS NOT NULL`,
  `CREATE INDEX inbox_processed_at_idx ON ${t("inbox")} (processed_at) WHERE processed_at IS NOT NULL`,

  // Topics an operator paused: their messages are not claimed.
  `CREATE TABLE ${t("paused_topics")} (
    topic text NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    paused_by text,
    CONSTRAINT paused_topics_pkey PRIMARY KEY (topic)
  )`,
  // The roles grantRuntimeAccess granted: every migration grants them what it adds.
  `CREATE TABLE ${t("runtime_roles")} (
    role text NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT runtime_roles_pkey PRIMARY KEY (role)
  )`,

  // Workflow executions and their journal (PgWorkflowEngine).
  `CREATE TABLE ${t("workflow_executions")} (
    workflow text NOT NULL,
    execution_id text NOT NULL,
    payload jsonb NOT NULL,
    payload_fingerprint text NOT NULL,
    payload_mismatches integer NOT NULL DEFAULT 0,
    parent_workflow text,
    parent_execution_id text,
    status text NOT NULL DEFAULT 'pending',
    result jsonb,
    interrupt_requested boolean NOT NULL DEFAULT false,
    interrupt_unsafe boolean NOT NULL DEFAULT false,
    resume_requested boolean NOT NULL DEFAULT false,
    wake_seq bigint NOT NULL DEFAULT 0,
    runs integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    CONSTRAINT workflow_executions_pkey PRIMARY KEY (workflow, execution_id),
    CONSTRAINT workflow_executions_status_check CHECK (status IN ('pending', 'running', 'suspended', 'complete')),
    CONSTRAINT workflow_executions_completed_check CHECK ((status = 'complete') = (completed_at IS NOT NULL)),
    CONSTRAINT workflow_executions_parent_check CHECK ((parent_workflow IS NULL) = (parent_execution_id IS NULL))
  )`,
  `CREATE INDEX workflow_executions_status_idx ON ${t("workflow_executions")} (status, updated_at)`,
  `CREATE INDEX workflow_executions_completed_idx ON ${t("workflow_executions")} (completed_at)
     WHERE completed_at IS NOT NULL`,
  `CREATE INDEX workflow_executions_parent_idx ON ${t("workflow_executions")} (parent_workflow, parent_execution_id)
     WHERE parent_execution_id IS NOT NULL`,
  `CREATE TABLE ${t("workflow_steps")} (
    workflow text NOT NULL,
    execution_id text NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    attempt integer NOT NULL DEFAULT 0,
    result jsonb,
    outbox_id bigint,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workflow_steps_pkey PRIMARY KEY (workflow, execution_id, kind, name, attempt),
    CONSTRAINT workflow_steps_kind_check CHECK (kind IN ('activity', 'deferred', 'clock'))
  )`,

  // Cron schedules and the slots they decided (one row per schedule and slot: once per slot).
  `CREATE TABLE ${t("schedules")} (
    name text NOT NULL,
    cron text NOT NULL,
    time_zone text NOT NULL,
    topic text NOT NULL,
    payload jsonb NOT NULL,
    ordering_key text,
    overlap text NOT NULL,
    catch_up_seconds double precision NOT NULL,
    next_slot timestamptz NOT NULL,
    paused_at timestamptz,
    paused_by text,
    enqueued bigint NOT NULL DEFAULT 0,
    skipped bigint NOT NULL DEFAULT 0,
    missed bigint NOT NULL DEFAULT 0,
    backfilled bigint NOT NULL DEFAULT 0,
    last_slot timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_pkey PRIMARY KEY (name),
    CONSTRAINT schedules_catch_up_check CHECK (catch_up_seconds >= 0),
    CONSTRAINT schedules_overlap_check CHECK (overlap IN ('skip', 'buffer-one', 'allow'))
  )`,
  `CREATE TABLE ${t("schedule_slots")} (
    schedule text NOT NULL,
    slot timestamptz NOT NULL,
    outcome text NOT NULL,
    message_id bigint,
    decided_at timestamptz NOT NULL DEFAULT now(),
    decided_by text NOT NULL,
    CONSTRAINT schedule_slots_pkey PRIMARY KEY (schedule, slot),
    CONSTRAINT schedule_slots_outcome_check CHECK (outcome IN ('enqueued', 'skipped', 'backfilled')),
    CONSTRAINT schedule_slots_message_check CHECK ((outcome = 'skipped') = (message_id IS NULL))
  )`,

  // Flow limits of the outbox, per topic: in flight (per topic, per group), rates (token
  // buckets on the database clock) and the fair-share clock.
  `CREATE TABLE ${t("flow_limits")} (
    topic text NOT NULL,
    max_in_flight integer,
    group_max_in_flight integer,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL,
    vclock double precision NOT NULL DEFAULT 0,
    rate_limit integer,
    rate_period double precision,
    rate_burst integer,
    group_rate_limit integer,
    group_rate_period double precision,
    group_rate_burst integer,
    tokens double precision,
    tokens_at timestamptz,
    CONSTRAINT flow_limits_pkey PRIMARY KEY (topic),
    CONSTRAINT flow_limits_max_in_flight_check CHECK (max_in_flight > 0),
    CONSTRAINT flow_limits_group_max_in_flight_check CHECK (group_max_in_flight > 0),
    CONSTRAINT flow_limits_rate_limit_check CHECK (rate_limit > 0),
    CONSTRAINT flow_limits_rate_period_check CHECK (rate_period > 0),
    CONSTRAINT flow_limits_rate_burst_check CHECK (rate_burst > 0),
    CONSTRAINT flow_limits_group_rate_limit_check CHECK (group_rate_limit > 0),
    CONSTRAINT flow_limits_group_rate_period_check CHECK (group_rate_period > 0),
    CONSTRAINT flow_limits_group_rate_burst_check CHECK (group_rate_burst > 0),
    CONSTRAINT rate_whole CHECK ((rate_limit IS NULL) = (rate_period IS NULL) AND (rate_limit IS NULL) = (rate_burst IS NULL)),
    CONSTRAINT group_rate_whole
      CHECK ((group_rate_limit IS NULL) = (group_rate_period IS NULL) AND (group_rate_limit IS NULL) = (group_rate_burst IS NULL))
  )`,
  // A group's own limit, weight and rate.
  `CREATE TABLE ${t("flow_group_limits")} (
    topic text NOT NULL,
    group_key text NOT NULL,
    max_in_flight integer,
    weight integer NOT NULL DEFAULT 1,
    rate_limit integer,
    rate_period double precision,
    rate_burst integer,
    CONSTRAINT flow_group_limits_pkey PRIMARY KEY (topic, group_key),
    CONSTRAINT flow_group_limits_topic_fkey FOREIGN KEY (topic) REFERENCES ${
    t("flow_limits")
  } (topic) ON DELETE CASCADE,
    CONSTRAINT flow_group_limits_max_in_flight_check CHECK (max_in_flight > 0),
    CONSTRAINT flow_group_limits_weight_check CHECK (weight > 0),
    CONSTRAINT flow_group_limits_rate_limit_check CHECK (rate_limit > 0),
    CONSTRAINT flow_group_limits_rate_period_check CHECK (rate_period > 0),
    CONSTRAINT flow_group_limits_rate_burst_check CHECK (rate_burst > 0),
    CONSTRAINT rate_whole CHECK ((rate_limit IS NULL) = (rate_period IS NULL) AND (rate_limit IS NULL) = (rate_burst IS NULL))
  )`,
  // A group's fair-share virtual time (what it was served, over its weight).
  `CREATE TABLE ${t("flow_group_state")} (
    topic text NOT NULL,
    group_key text NOT NULL,
    vtime double precision NOT NULL,
    CONSTRAINT flow_group_state_pkey PRIMARY KEY (topic, group_key)
  )`,
  // A group's token bucket while it is not full (no row: full).
  `CREATE TABLE ${t("flow_group_buckets")} (
    topic text NOT NULL,
    group_key text NOT NULL,
    tokens double precision NOT NULL,
    tokens_at timestamptz NOT NULL,
    CONSTRAINT flow_group_buckets_pkey PRIMARY KEY (topic, group_key)
  )`,
  // The capacity a limited topic's claims took: a row per claim and group, in capacity slots.
  `CREATE TABLE ${t("flow_claims")} (
    id bigserial,
    topic text NOT NULL,
    group_key text NOT NULL,
    entries bigint[] NOT NULL,
    generations bigint[] NOT NULL,
    taken integer NOT NULL,
    slot smallint NOT NULL DEFAULT 0,
    CONSTRAINT flow_claims_pkey PRIMARY KEY (id),
    CONSTRAINT flow_claims_taken_check CHECK (taken > 0)
  )`,
  `CREATE INDEX flow_claims_topic_idx ON ${t("flow_claims")} (topic, group_key)`,
  // Flow limits of the stored inbox, per consumer, and the capacity its claims took.
  `CREATE TABLE ${t("inbox_limits")} (
    consumer text NOT NULL,
    max_in_flight integer,
    tokens double precision,
    tokens_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL,
    rate_limit integer,
    rate_period double precision,
    rate_burst integer,
    CONSTRAINT inbox_limits_pkey PRIMARY KEY (consumer),
    CONSTRAINT inbox_limits_max_in_flight_check CHECK (max_in_flight > 0),
    CONSTRAINT inbox_limits_rate_limit_check CHECK (rate_limit > 0),
    CONSTRAINT inbox_limits_rate_period_check CHECK (rate_period > 0),
    CONSTRAINT inbox_limits_rate_burst_check CHECK (rate_burst > 0),
    CONSTRAINT rate_whole CHECK ((rate_limit IS NULL) = (rate_period IS NULL) AND (rate_limit IS NULL) = (rate_burst IS NULL))
  )`,
  `CREATE TABLE ${t("inbox_flow_claims")} (
    id bigserial,
    consumer text NOT NULL,
    entries bigint[] NOT NULL,
    generations bigint[] NOT NULL,
    taken integer NOT NULL,
    slot smallint NOT NULL DEFAULT 0,
    CONSTRAINT inbox_flow_claims_pkey PRIMARY KEY (id),
    CONSTRAINT inbox_flow_claims_taken_check CHECK (taken > 0)
  )`,
  `CREATE INDEX inbox_flow_claims_consumer_idx ON ${t("inbox_flow_claims")} (consumer)`,

  // RateLimiterStore's state (effect/persistence/RateLimiter): times in epoch milliseconds.
  `CREATE TABLE ${t("rate_windows")} (
    key text NOT NULL,
    count double precision NOT NULL,
    expires_at double precision NOT NULL,
    CONSTRAINT rate_windows_pkey PRIMARY KEY (key)
  )`,
  `CREATE TABLE ${t("rate_buckets")} (
    key text NOT NULL,
    tokens double precision NOT NULL,
    refilled_at double precision NOT NULL,
    expires_at double precision NOT NULL,
    CONSTRAINT rate_buckets_pkey PRIMARY KEY (key)
  )`,
  `CREATE TABLE ${t("rate_adaptive")} (
    key text NOT NULL,
    phase text NOT NULL,
    epoch integer NOT NULL,
    cooldown_until double precision NOT NULL,
    learning_started_at double precision NOT NULL,
    observed_tokens double precision NOT NULL,
    learned_limit double precision NOT NULL,
    learned_window double precision NOT NULL,
    expires_at double precision NOT NULL,
    CONSTRAINT rate_adaptive_pkey PRIMARY KEY (key),
    CONSTRAINT rate_adaptive_phase_check CHECK (phase IN ('cooldown', 'learning', 'learned'))
  )`
]

/**
 * The clusters this schema has lived on, each an epoch of feed positions
 * (`internal/functions/feed.ts`): before the feed's functions, which name it, and the tables,
 * whose defaults call them.
 */
const feedLineage = (t: (table: string) => string) =>
  `CREATE TABLE ${t("feed_lineage")} (
    epoch bigint NOT NULL,
    system_identifier text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT feed_lineage_pkey PRIMARY KEY (epoch)
  )`

export const migration: Migration = {
  version: 1,
  name: "baseline",
  statements: (t) => [
    feedLineage(t),
    ...feedFunctions(t),
    ...tables(t),
    tokensFunction(t),
    mutationLookup(t),
    ...batchWrites(t),
    ...historyFunctions(t),
    ...rateLimiterFunctions(t),
    ...claimFunctions(t)
  ]
}
