/**
 * Version 2: what a suspended workflow execution waits on, and its searchable attributes. A run that suspends writes, with its
 * result, the deferreds (by name), the durable clocks (by name) and the child executions it was
 * waiting for (`WorkflowAdmin` shows them; the clocks' due times are their outbox messages').
 * A column without a default: adding it rewrites nothing. Executions suspended before it say
 * nothing until their next run. `attributes` (`WorkflowAttributes`): named strings an operator
 * finds an execution by, with a GIN index for `@>` (a constant default: no rewrite either).
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 2,
  name: "workflow waits and attributes",
  statements: (t) => [
    `ALTER TABLE ${t("workflow_executions")} ADD COLUMN waiting_on jsonb`,
    `ALTER TABLE ${t("workflow_executions")} ADD COLUMN attributes jsonb NOT NULL DEFAULT '{}'::jsonb`,
    `CREATE INDEX workflow_executions_attributes_idx ON ${
      t("workflow_executions")
    } USING gin (attributes jsonb_path_ops)`
  ]
}
