/** The arguments the `workflows` commands share: a workflow, an execution of it, a filter by workflow. */
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as Argument from "effect/cli/Argument"
import * as Flag from "effect/cli/Flag"

export const workflow = Argument.String("workflow").pipe(
  Argument.withMetavar("WORKFLOW"),
  Argument.withDescription("The workflow's name (its Workflow.make tag)")
)
export const executionId = Argument.String("execution-id").pipe(
  Argument.withMetavar("EXECUTION_ID"),
  Argument.withDescription(
    `The execution's id, or a prefix of it only one execution of the workflow has (at least ${WorkflowAdmin.MIN_PREFIX_LENGTH} characters: the short form \`workflows list\` shows)`
  )
)

export const onlyWorkflow = Flag.String("workflow").pipe(
  Flag.withMetavar("WORKFLOW"),
  Flag.optional,
  Flag.withDescription("Only this workflow's executions")
)
