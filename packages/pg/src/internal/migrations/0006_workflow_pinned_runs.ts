/**
 * Version 6: a workflow execution pinned to the deploy version it started under
 * (`PgWorkflowEngine`'s `pinned`): its run messages go to that version's topic
 * (`workflow.run:<name>@<version>`), which only processes of that version claim. A column with a
 * constant default: adding it rewrites no row (PostgreSQL 11 and later keep the default in the
 * catalog); executions started before it are not pinned.
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 6,
  name: "workflow pinned runs",
  statements: (t) => [`ALTER TABLE ${t("workflow_executions")} ADD COLUMN pinned boolean NOT NULL DEFAULT false`]
}
