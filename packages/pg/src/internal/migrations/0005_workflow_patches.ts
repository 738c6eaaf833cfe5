/**
 * Version 5: a workflow's journal holds patch markers (`WorkflowPatch.patched`): which branch of
 * a patched piece of code a run took, kept so every replay takes it again. The kind check is
 * widened: added `NOT VALID` then validated, so the table is read under a lock that lets writes
 * go on (every row already passes the wider check).
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 5,
  name: "workflow patches",
  statements: (t) => [
    `ALTER TABLE ${t("workflow_steps")} DROP CONSTRAINT workflow_steps_kind_check,
       ADD CONSTRAINT workflow_steps_kind_check CHECK (kind IN ('activity', 'deferred', 'clock', 'patch')) NOT VALID`,
    `ALTER TABLE ${t("workflow_steps")} VALIDATE CONSTRAINT workflow_steps_kind_check`
  ]
}
