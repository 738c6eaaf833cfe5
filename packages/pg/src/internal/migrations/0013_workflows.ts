/**
 * Version 13, released: never edit it (a test holds its text); add the next version instead.
 *
 * The tables of `@effect-durable/workflow`, the PostgreSQL engine for `effect/workflow`:
 *
 * - `workflow_executions`: one row per (workflow, execution id): the payload as first
 *   encoded and its fingerprint (a later start with another payload is counted in
 *   `payload_mismatches`, never applied), the parent to wake when it completes, its status
 *   (`pending` a run is due, `running` one is under way, `suspended` waiting for a deferred,
 *   a clock or a resume, `complete`), the last run's encoded `Workflow.Result`, whether an
 *   interrupt was asked (and whether unsafely), whether an explicit resume was asked during
 *   a run (only that wakes a run suspended by `SuspendOnFailure`), and `wake_seq`, bumped by
 *   every wake (a deferred done, an interrupt, a child completing). A run reads it when it starts and, when it would settle `suspended`,
 *   again under the row's lock: a wake that landed during the run makes it settle `pending`
 *   and schedule the next run instead — no wake-up is lost to a run already under way.
 * - `workflow_steps`: the journal a replay reads: an activity's result per (name, attempt),
 *   a deferred's exit per name (first write wins: the primary key), a clock per name with the
 *   outbox message that will fire it. No foreign key to the execution: a deferred may be done
 *   before its execution is started (the contract allows it); a purge deletes both.
 *
 * A run is the delivery of an outbox message (topic `workflow.run:<workflow>`, ordering key
 * `<workflow>/<execution id>`): the outbox's per-key order gives one run of an execution at a
 * time, its lease and claim generation fence the run's settle.
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 13,
  name: "workflow executions and their step journal",
  statements: (t) => [
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
        CONSTRAINT workflow_executions_status_check
          CHECK (status IN ('pending', 'running', 'suspended', 'complete')),
        CONSTRAINT workflow_executions_completed_check CHECK ((status = 'complete') = (completed_at IS NOT NULL)),
        CONSTRAINT workflow_executions_parent_check CHECK ((parent_workflow IS NULL) = (parent_execution_id IS NULL))
      )`,
    `CREATE INDEX workflow_executions_status_idx ON ${t("workflow_executions")} (status, updated_at)`,
    `CREATE INDEX workflow_executions_parent_idx ON ${t("workflow_executions")} (parent_workflow, parent_execution_id)
       WHERE parent_execution_id IS NOT NULL`,
    `CREATE INDEX workflow_executions_completed_idx ON ${t("workflow_executions")} (completed_at)
       WHERE completed_at IS NOT NULL`,
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
      )`
  ]
}
