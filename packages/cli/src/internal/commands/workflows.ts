/**
 * `effect-durable workflows list|show|waiting|interrupt|resume|purge|versions|patches|stranded|repin|fork`: the
 * executions of `@effect-durable/workflow`'s engine, without the workflows' code. Interrupt and
 * resume are durable requests the execution's next run applies, wherever its workflow is
 * registered; versions, patches, stranded and repin are what a deploy of workflow code reads and
 * does.
 */
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as WorkflowAttributes from "@effect-durable/workflow/WorkflowAttributes"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { duration, json, positive, toggle } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { checkFailed, usage } from "../errors.js"
import { operatorName } from "../operator.js"
import * as Output from "../output.js"
import { executionId, onlyWorkflow, workflow } from "./workflowArguments.js"
import { fork, patches, repin, stranded, versions } from "./workflowDeploys.js"

const list = Command.make(
  "list",
  {
    workflow: onlyWorkflow,
    status: Flag.Literals("status", WorkflowAdmin.Statuses).pipe(
      Flag.optional,
      Flag.withDescription("Only executions in this status")
    ),
    attribute: Flag.String("attribute").pipe(
      Flag.withMetavar("NAME=VALUE"),
      Flag.optional,
      Flag.withDescription("Only executions with this searchable attribute (WorkflowAttributes), e.g. subscription=48")
    ),
    limit: positive("limit", 50, 1_000, "How many, most recently changed first"),
    fullIds: toggle(
      "full-ids",
      `Show execution ids whole (by default a long id shows its first ${WorkflowAdmin.SHORT_ID_LENGTH} characters, which every command here takes back)`
    ),
    json
  },
  Effect.fn("effect-durable.workflows.list")(
    function*(args) {
      const admin = yield* WorkflowAdmin.make
      const attribute = Option.getOrUndefined(args.attribute)
      const attributes = attribute === undefined ? undefined : WorkflowAttributes.parseFilter(attribute)
      if (attribute !== undefined && attributes === undefined) {
        return yield* usage("--attribute: NAME=VALUE, e.g. subscription=48")
      }
      const executions = yield* admin.list({
        workflow: Option.getOrUndefined(args.workflow),
        status: Option.getOrUndefined(args.status),
        attributes,
        limit: args.limit
      })
      if (args.json) return yield* Output.json({ executions })
      yield* Output.line(
        executions.length === 0 ? "no workflow executions" : Output.table<typeof executions[number]>([
          { header: "WORKFLOW", value: (e) => e.workflow },
          { header: "EXECUTION", value: (e) => args.fullIds ? e.executionId : WorkflowAdmin.shortId(e.executionId) },
          {
            header: "STATUS",
            value: (e) => e.status + (e.interruptRequested && e.status !== "complete" ? " (interrupting)" : "")
          },
          { header: "RUNS", value: (e) => e.runs },
          { header: "UPDATED", value: (e) => e.updatedAt },
          { header: "WAITING ON", value: (e) => e.waitingOn?.map(WorkflowAdmin.describeWait).join(", ") ?? "" },
          { header: "", value: (e) => (e.payloadMismatches > 0 ? `${e.payloadMismatches} payload mismatches` : "") }
        ], executions)
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("List workflow executions, most recently changed first"))

const show = Command.make(
  "show",
  { workflow, executionId, json },
  Effect.fn("effect-durable.workflows.show")(
    function*(args) {
      const admin = yield* WorkflowAdmin.make
      const id = yield* admin.resolve(args.workflow, args.executionId)
      const found = id === undefined ? undefined : yield* admin.show(args.workflow, id)
      if (found === undefined) {
        return yield* checkFailed(`no execution ${args.executionId} of workflow ${args.workflow}`)
      }
      if (args.json) return yield* Output.json(found)
      const field = (name: string, value: string | number) =>
        `${`${name}:`.padEnd(11)}${Output.printable(String(value))}`
      yield* Output.line([
        field("execution", `${found.workflow} / ${found.executionId}`),
        field("status", found.status + (found.interruptRequested ? " (interrupt requested)" : "")),
        field("runs", found.runs),
        field("created", found.createdAt),
        field("updated", found.updatedAt),
        ...(found.completedAt === null ? [] : [field("completed", found.completedAt)]),
        ...(found.parent === null ? [] : [field("parent", `${found.parent.workflow} / ${found.parent.executionId}`)]),
        ...(found.group === null ? [] : [field("group", found.group)]),
        ...(found.version === null ? [] : [field("version", found.version)]),
        ...(found.waits ?? []).map((wait) => field("waiting", WorkflowAdmin.describeWait(wait))),
        ...Object.entries(found.attributes).map(([name, value]) => field("attribute", `${name}=${value}`)),
        ...(found.payloadMismatches === 0
          ? []
          : [field("mismatches", `${found.payloadMismatches} later starts with another payload (ignored)`)]),
        field("payload", Output.clip(Output.stringify(found.payload), 200) ?? "-"),
        field("result", Output.clip(Output.stringify(found.result), 200) ?? "-"),
        "",
        found.steps.length === 0 ? "no steps recorded" : Output.table<typeof found.steps[number]>([
          { header: "KIND", value: (s) => s.kind },
          { header: "NAME", value: (s) => s.name },
          { header: "ATTEMPT", value: (s) => s.attempt },
          { header: "RECORDED", value: (s) => s.recordedAt },
          { header: "RESULT", value: (s) => Output.clip(Output.stringify(s.result), 80) }
        ], found.steps)
      ].join("\n"))
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Show a workflow execution and its recorded steps"))

const waiting = Command.make(
  "waiting",
  {
    workflow: onlyWorkflow,
    json
  },
  Effect.fn("effect-durable.workflows.waiting")(
    function*(args) {
      const admin = yield* WorkflowAdmin.make
      const counts = yield* admin.waiting({ workflow: Option.getOrUndefined(args.workflow) })
      if (args.json) return yield* Output.json({ waiting: counts })
      yield* Output.line(
        counts.length === 0 ? "no suspended executions" : Output.table<typeof counts[number]>([
          { header: "WORKFLOW", value: (c) => c.workflow },
          { header: "WAITING ON", value: (c) => `${c.kind}${c.name === "" ? "" : ` ${c.name}`}` },
          { header: "EXECUTIONS", value: (c) => c.executions },
          { header: "SINCE", value: (c) => c.since }
        ], counts)
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(
  Command.withDescription(
    "Count suspended workflow executions by what they wait on (a deferred, a clock, a child, a resume)"
  )
)

/** interrupt and resume: a durable request by name, logged as an operator action, reported whether it applied. */
const request = (
  name: "interrupt" | "resume",
  act: (admin: WorkflowAdmin.WorkflowAdmin) => WorkflowAdmin.WorkflowAdmin["interrupt"],
  applied: string,
  notApplied: string,
  description: string
) =>
  Command.make(
    name,
    { workflow, executionId, json },
    Effect.fn(`effect-durable.workflows.${name}`)(
      function*(args) {
        const admin = yield* WorkflowAdmin.make
        const id = yield* admin.resolve(args.workflow, args.executionId)
        const changed = id === undefined ? false : yield* act(admin)(args.workflow, id)
        const executionId = id ?? args.executionId
        yield* Effect.logInfo(
          `operator action: ${name} workflow ${args.workflow} execution ${executionId} by ${operatorName()}`
        )
        if (args.json) return yield* Output.json({ workflow: args.workflow, executionId, changed })
        yield* Output.line(
          changed
            ? applied
            : `no ${notApplied} execution ${Output.printable(args.executionId)} of ${Output.printable(args.workflow)}`
        )
      },
      withDatabase({ poolSize: 1 })
    )
  ).pipe(Command.withDescription(description))

const interrupt = request(
  "interrupt",
  (admin) => admin.interrupt,
  "interrupt requested: its next run ends it interrupted and runs its compensations",
  "unfinished",
  "Interrupt a workflow execution (durable; its compensations run)"
)

const resume = request(
  "resume",
  (admin) => admin.resume,
  "resumed: a run of it is due",
  "suspended",
  "Resume a suspended workflow execution (one suspended on its own failure too)"
)

const purge = Command.make(
  "purge",
  {
    olderThan: duration("older-than").pipe(
      Flag.withDescription(
        `Required. Retention: delete executions complete for longer (at least ${WorkflowAdmin.PURGE_FLOOR})`
      )
    ),
    batchSize: positive("batch-size", 1000, 10_000, "Executions deleted per committed batch"),
    dryRun: toggle("dry-run", "Count what would be deleted; delete nothing"),
    json
  },
  Effect.fn("effect-durable.workflows.purge")(
    function*(args) {
      const admin = yield* WorkflowAdmin.make
      const n = args.dryRun
        ? yield* admin.purgeable(args.olderThan)
        : yield* Output.withProgressLogs(
          "purge workflows",
          admin.purge({ olderThan: args.olderThan, batchSize: args.batchSize })
        )
      if (args.json) {
        return yield* Output.json({ olderThan: args.olderThan, [args.dryRun ? "wouldDelete" : "deleted"]: n })
      }
      yield* Output.line(
        `${args.dryRun ? "would delete" : "deleted"} ${
          Output.plural(n, "complete workflow execution")
        } (with their steps) older than ${args.olderThan}`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Delete workflow executions complete past a retention, with their steps"))

export const workflows = Command.make(
  "workflows",
  {},
  () =>
    usage(
      "workflows: name a subcommand: list, show, waiting, interrupt, resume, purge, versions, patches, stranded, repin, fork"
    )
).pipe(
  Command.withDescription("List, show, interrupt and resume workflow executions"),
  Command.withSubcommands([list, show, waiting, interrupt, resume, purge, versions, patches, stranded, repin, fork])
)
