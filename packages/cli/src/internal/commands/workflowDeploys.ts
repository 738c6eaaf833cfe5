/**
 * `effect-durable workflows versions|patches|stranded|repin`: what a deploy of workflow code reads
 * (runs by deploy version, the diverged and stranded among them, the branches of each patch) and
 * the operator's move of a run to another version (`WorkflowDeploys`).
 */
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as WorkflowDeploys from "@effect-durable/workflow/WorkflowDeploys"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { duration, json, positive, toggle } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { checkFailed, invalidValue, usage } from "../errors.js"
import { operatorName } from "../operator.js"
import * as Output from "../output.js"
import { executionId, onlyWorkflow, workflow } from "./workflowArguments.js"

export const versions = Command.make(
  "versions",
  { workflow: onlyWorkflow, json },
  Effect.fn("effect-durable.workflows.versions")(
    function*(args) {
      const deploys = yield* WorkflowDeploys.make
      const counts = yield* deploys.versions({ workflow: Option.getOrUndefined(args.workflow) })
      if (args.json) return yield* Output.json({ versions: counts })
      yield* Output.line(
        counts.length === 0 ? "no unfinished executions" : Output.table<typeof counts[number]>([
          { header: "WORKFLOW", value: (c) => c.workflow },
          { header: "VERSION", value: (c) => c.version ?? "(none)" },
          { header: "UNFINISHED", value: (c) => c.unfinished },
          { header: "DIVERGED", value: (c) => c.diverged },
          { header: "STRANDED", value: (c) => c.stranded },
          { header: "OLDEST STARTED", value: (c) => c.oldestStartedAt }
        ], counts)
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(
  Command.withDescription(
    "Count unfinished workflow executions by the deploy version they started under, and those diverged"
  )
)

export const patches = Command.make(
  "patches",
  {
    workflow,
    patch: Argument.String("patch").pipe(
      Argument.withMetavar("PATCH"),
      Argument.optional,
      Argument.withDescription("Only this patch (WorkflowPatch.patched's id), listed even when no run recorded it")
    ),
    json
  },
  Effect.fn("effect-durable.workflows.patches")(
    function*(args) {
      const deploys = yield* WorkflowDeploys.make
      const report = yield* deploys.patches(args.workflow)
      const uses = Option.match(args.patch, {
        onNone: () => report.patches,
        onSome: (id) => [WorkflowDeploys.use(report, id)]
      })
      if (args.json) {
        return yield* Output.json({ workflow: report.workflow, unfinished: report.unfinished, patches: uses })
      }
      yield* Output.line(
        uses.length === 0
          ? `no unfinished execution of ${Output.printable(report.workflow)} recorded a patch (${
            Output.plural(report.unfinished, "unfinished execution")
          })`
          : Output.table<typeof uses[number]>([
            { header: "PATCH", value: (p) => p.patch },
            { header: "PATCHED", value: (p) => p.patched },
            { header: "OLD BRANCH", value: (p) => p.unpatched },
            { header: "UNDECIDED", value: (p) => p.undecided },
            { header: "OLD BRANCH DROPPABLE", value: (p) => p.droppable ? "yes" : "no" }
          ], uses)
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(
  Command.withDescription(
    "For each patch of a workflow: unfinished runs on its patched branch, on its old one, and not there yet; whether a deploy may drop the old branch"
  )
)

export const stranded = Command.make(
  "stranded",
  {
    workflow: onlyWorkflow,
    after: duration("after").pipe(
      Flag.optional,
      Flag.withDescription(`Due and unclaimed for longer than this (default ${WorkflowDeploys.STRANDED_AFTER})`)
    ),
    limit: positive("limit", 100, 1000, "At most this many"),
    json
  },
  Effect.fn("effect-durable.workflows.stranded")(
    function*(args) {
      const deploys = yield* WorkflowDeploys.make
      const runs = yield* deploys.stranded({
        workflow: Option.getOrUndefined(args.workflow),
        after: Option.getOrUndefined(args.after),
        limit: args.limit
      })
      if (args.json) return yield* Output.json({ stranded: runs })
      yield* Output.line(
        runs.length === 0 ? "no stranded runs" : Output.table<typeof runs[number]>([
          { header: "WORKFLOW", value: (r) => r.workflow },
          { header: "EXECUTION", value: (r) => WorkflowAdmin.shortId(r.executionId) },
          { header: "PINNED TO", value: (r) => r.version },
          { header: "DUE SINCE", value: (r) => r.dueSince }
        ], runs)
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(
  Command.withDescription(
    "List pinned workflow runs due with no process of their version claiming them (deploy one, or repin them)"
  )
)

export const repin = Command.make(
  "repin",
  {
    workflow,
    executionId,
    version: Argument.String("version").pipe(
      Argument.withMetavar("VERSION"),
      Argument.optional,
      Argument.withDescription("The deploy version whose processes run it from now on")
    ),
    unpin: toggle("unpin", "Unpin it instead: any process of its workflow runs it"),
    json
  },
  Effect.fn("effect-durable.workflows.repin")(
    function*(args) {
      if (Option.isSome(args.version) === args.unpin) {
        return yield* usage("workflows repin: give a VERSION, or --unpin")
      }
      const admin = yield* WorkflowAdmin.make
      const deploys = yield* WorkflowDeploys.make
      const id = yield* admin.resolve(args.workflow, args.executionId)
      const version = Option.getOrNull(args.version)
      const changed = id === undefined ? false : yield* deploys.repin(args.workflow, id, version)
      const executionId = id ?? args.executionId
      yield* Effect.logInfo(
        `operator action: repin workflow ${args.workflow} execution ${executionId} to ${
          version ?? "(unpinned)"
        } by ${operatorName()}`
      )
      if (args.json) return yield* Output.json({ workflow: args.workflow, executionId, version, changed })
      yield* Output.line(
        changed
          ? version === null
            ? "unpinned: any process of its workflow runs it"
            : `pinned to ${Output.printable(version)}: only processes of that version run it (resume it if it diverged)`
          : `no unfinished execution ${Output.printable(args.executionId)} of ${Output.printable(args.workflow)}`
      )
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(
  Command.withDescription(
    "Pin an unfinished workflow execution to another deploy version, or unpin it (its due run moves with it)"
  )
)

const STEP_KINDS = ["activity", "deferred", "clock", "patch"] as const

export const fork = Command.make(
  "fork",
  {
    workflow,
    executionId,
    from: Flag.String("from").pipe(
      Flag.withMetavar("KIND:NAME"),
      Flag.withDescription("Required. The step to restart from, as `workflows show` lists it: activity:charge"),
      Flag.mapEffect((text) => {
        const at = text.indexOf(":")
        const kind = STEP_KINDS.find((k) => k === text.slice(0, at))
        return at < 1 || kind === undefined || at === text.length - 1
          ? Effect.fail(invalidValue(`--from: KIND:NAME, KIND one of ${STEP_KINDS.join(", ")} (got ${text})`))
          : Effect.succeed({ kind, name: text.slice(at + 1) })
      })
    ),
    attempt: Flag.Int("attempt").pipe(
      Flag.withMetavar("N"),
      Flag.optional,
      Flag.withDescription("The step's attempt (default: an activity's first, 1)")
    ),
    as: Flag.String("as").pipe(
      Flag.withMetavar("EXECUTION_ID"),
      Flag.optional,
      Flag.withDescription("The fork's execution id (default: <id>/fork-<8 hex>)")
    ),
    version: Flag.String("version").pipe(
      Flag.withMetavar("VERSION"),
      Flag.optional,
      Flag.withDescription("Run the fork pinned to this deploy version (default: as the original runs)")
    ),
    json
  },
  Effect.fn("effect-durable.workflows.fork")(
    function*(args) {
      const admin = yield* WorkflowAdmin.make
      const deploys = yield* WorkflowDeploys.make
      const id = yield* admin.resolve(args.workflow, args.executionId)
      const forked = id === undefined ? undefined : yield* deploys.fork({
        workflow: args.workflow,
        executionId: id,
        from: { ...args.from, attempt: Option.getOrUndefined(args.attempt) },
        as: Option.getOrUndefined(args.as),
        version: Option.getOrUndefined(args.version)
      })
      yield* Effect.logInfo(
        `operator action: fork workflow ${args.workflow} execution ${
          id ?? args.executionId
        } from ${args.from.kind} ${args.from.name} as ${forked ?? "(nothing)"} by ${operatorName()}`
      )
      if (forked === undefined) {
        return yield* checkFailed(`no execution ${args.executionId} of workflow ${args.workflow}`)
      }
      if (args.json) return yield* Output.json({ workflow: args.workflow, executionId: id, forked })
      yield* Output.line(`forked as ${Output.printable(forked)}: its run is due`)
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(
  Command.withDescription(
    "Restart a workflow execution from one of its steps as a new execution (its journal before that step kept)"
  )
)
