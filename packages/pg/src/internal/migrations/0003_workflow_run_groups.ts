/**
 * Version 3: the flow group of a workflow execution's runs (`WorkflowLimits`). The engine reads
 * it from the payload once, at the start, and every run message of the execution (its first, a
 * wake's, a settle's next) carries it as its group, so a limit on the workflow's run topic holds
 * per tenant across every run of every execution. A nullable column without a default: adding it
 * rewrites nothing; executions started before it run ungrouped.
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 3,
  name: "workflow run groups",
  statements: (t) => [`ALTER TABLE ${t("workflow_executions")} ADD COLUMN run_group text`]
}
