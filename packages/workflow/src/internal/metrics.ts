/** The workflow engine's metrics, exported by `PgWorkflowEngine` as `metrics`. */
import * as Metric from "effect/Metric"

export const metrics = {
  runs: Metric.counter("effect_durable_workflow_runs", { description: "workflow runs, by outcome" }),
  payloadMismatches: Metric.counter("effect_durable_workflow_payload_mismatches", {
    description: "starts of an existing execution with another payload"
  }),
  repeatedActivities: Metric.counter("effect_durable_workflow_repeated_activities", {
    description: "the same activity (name, attempt) asked twice within one run: a reused or renamed activity name"
  }),
  activities: Metric.counter("effect_durable_workflow_activities", {
    description: "activity executions (not replays), by workflow, activity and outcome"
  }),
  divergences: Metric.counter("effect_durable_workflow_divergences", {
    description: "runs whose code and journal diverged (docs/workflows.md, \"Deploying changes\"), by workflow"
  }),
  activityDuration: Metric.timer("effect_durable_workflow_activity_duration", {
    description: "how long activity executions take, by workflow and activity"
  })
}
