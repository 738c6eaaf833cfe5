/**
 * Version 5: a workflow's journal holds patch markers (`WorkflowPatch.patched`): which branch of
 * a patched piece of code a run took, kept so every replay takes it again. The kind check is
 * widened and added `NOT VALID`: it holds for every row written from now on and scans none (every
 * row already passes the wider check), so the table is locked only for the moment of the change.
 * (A `VALIDATE` in the same transaction would scan it under that lock.)
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 5,
  name: "workflow patches",
  statements: (t) => [
    `ALTER TABLE ${t("workflow_steps")} DROP CONSTRAINT workflow_steps_kind_check,
       ADD CONSTRAINT workflow_steps_kind_check CHECK (kind IN ('activity', 'deferred', 'clock', 'patch')) NOT VALID`
  ]
}
