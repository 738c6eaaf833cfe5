/**
 * Version 4: the deploy version a workflow execution started under (`PgWorkflowEngine`'s
 * `version`): what an operator reads to know which code a run belongs to, and what pinning a run
 * to its version will route by. A nullable column without a default: adding it rewrites nothing;
 * executions started before it, or by an engine given no version, have none.
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 4,
  name: "workflow deploy versions",
  statements: (t) => [`ALTER TABLE ${t("workflow_executions")} ADD COLUMN deploy_version text`]
}
