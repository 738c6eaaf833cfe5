/**
 * Limits on a workflow's runs: at most N of its executions running at once across every process,
 * at most M of one group's (a tenant, a customer), a group's own limit and weight, rates — the
 * flow limits of `@effect-durable/pg/FlowControl`, held by the claim of the workflow's run topic.
 *
 * A run is what executes a workflow's code between two suspensions: its activities run inside
 * it. An execution waiting on a deferred, a clock or a child holds no capacity (as Inngest counts
 * steps, not sleeping functions); one whose run is held back by a limit stays `pending`, and
 * `WorkflowAdmin` says it waits on the limit. The group is read from the payload once, at the
 * start, and stored with the execution: every run message of it carries it.
 *
 * A step of a larger workflow gets its own limit as a child workflow with one: the parent
 * suspends while the child waits for room.
 *
 * @since 0.5.0
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Schema from "effect/Schema"
import type * as Workflow from "effect/workflow/Workflow"
import { runTopic } from "./internal/store.js"

/**
 * The annotation a workflow's group is read by (`groupBy` sets it): a function of the payload
 * returning the group, 1-128 bytes. Absent: the executions run ungrouped (only the workflow's
 * own limits hold them).
 */
export const Group = Context.Reference<((payload: any) => string) | undefined>(
  "@effect-durable/workflow/WorkflowLimits/Group",
  { defaultValue: () => undefined }
)

/**
 * The workflow, its executions grouped by `group` of their payload:
 * `WorkflowLimits.groupBy(Charge, (payload) => payload.tenant)`.
 */
export const groupBy = <
  Tag extends string,
  Payload extends Workflow.AnyStructSchema,
  Success extends Schema.Top,
  Error extends Schema.Top
>(
  workflow: Workflow.Workflow<Tag, Payload, Success, Error>,
  group: (payload: Payload["Type"]) => string
): Workflow.Workflow<Tag, Payload, Success, Error> => workflow.annotate(Group, group)

const decodeGroup = Input.argument("group", Input.Text(128))

/**
 * The group of an execution of `workflow` started with `payload`, checked (1-128 bytes, no lone
 * surrogate): `InvalidInput` naming the rule for a bad one. Undefined when the workflow has none.
 */
export const groupOf = (workflow: Workflow.Any, payload: unknown): Effect.Effect<string | undefined, InvalidInput> => {
  const group = Context.get(workflow.annotations, Group)
  // The function is the application's: a throw in it is a defect of this effect, not of the call.
  return group === undefined ? Effect.undefined : Effect.suspend(() => decodeGroup(group(payload)))
}

/** The outbox topic a workflow's runs are messages of: where its limits live (`effect-durable limits`). */
export const topic = (workflow: Workflow.Any | string): string =>
  runTopic(typeof workflow === "string" ? workflow : workflow._tag)

/** Sets (replaces) the limits of a workflow's runs; its group settings stay. */
export const set = (
  workflow: Workflow.Any | string,
  options: FlowControl.LimitOptions
): Effect.Effect<void, InvalidInput | DatabaseError, FlowControl.FlowControl> =>
  Effect.flatMap(FlowControl.FlowControl, (flow) => flow.setLimit(topic(workflow), options))

/** Sets one group's own limit, weight and rate for a workflow's runs. */
export const setGroup = (
  workflow: Workflow.Any | string,
  group: string,
  options: FlowControl.GroupOptions
): Effect.Effect<void, InvalidInput | DatabaseError, FlowControl.FlowControl> =>
  Effect.flatMap(FlowControl.FlowControl, (flow) => flow.setGroup(topic(workflow), group, options))

/** Removes every limit of a workflow's runs. Returns whether it had any. */
export const clear = (
  workflow: Workflow.Any | string
): Effect.Effect<boolean, InvalidInput | DatabaseError, FlowControl.FlowControl> =>
  Effect.flatMap(FlowControl.FlowControl, (flow) => flow.clear(topic(workflow)))
