/**
 * The record of schema versions, in order: what the migration runner (`Migrations.ts`) applies,
 * and nothing else reads. A version at or below `RELEASED_THROUGH` was released (a version tag
 * names the release that shipped it): its text is frozen, its checksum held by a test, and it
 * never changes. A version above it is unreleased and may still change (databases that applied
 * an earlier text of it are refused at start, naming it).
 */
import type { Migration } from "../../Migrations.js"
import { migration as baseline } from "./0001_baseline.js"
import { migration as workflowWaits } from "./0002_workflow_waits.js"
import { migration as workflowRunGroups } from "./0003_workflow_run_groups.js"
import { migration as workflowDeployVersions } from "./0004_workflow_deploy_versions.js"
import { migration as workflowPatches } from "./0005_workflow_patches.js"
import { migration as workflowPinnedRuns } from "./0006_workflow_pinned_runs.js"
import { migration as relaySlots } from "./0007_relay_slots.js"

/** The last released version (0: nothing released yet; the packages have not been published). */
export const RELEASED_THROUGH = 0

export const versions: ReadonlyArray<Migration> = [
  baseline,
  workflowWaits,
  workflowRunGroups,
  workflowDeployVersions,
  workflowPatches,
  workflowPinnedRuns,
  relaySlots
]
