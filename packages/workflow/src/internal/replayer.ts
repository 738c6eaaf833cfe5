/**
 * Replays of journals taken from elsewhere (a database, the CLI's `workflows show --json`)
 * against the code being deployed, on the engine in replay mode (`PgWorkflowEngine.layerReplay`):
 * each history is seeded into the in-memory store and run once. Recorded steps answer from the
 * journal, nothing past it runs (a new step, a child: the run stops there, suspended), and what
 * the run became says whether the code agrees with the journal (`replay.ts`).
 */
import { InvalidInput } from "@effect-durable/core/Errors"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Codec from "./codec.js"
import type { EngineContext } from "./engineContext.js"
import type { MemoryStore } from "./memoryStore.js"

/** One execution's journal, as `WorkflowAdmin.show` (and `workflows show --json`) gives it. */
export const History = Schema.Struct({
  workflow: Schema.String,
  executionId: Schema.String,
  payload: Schema.Unknown,
  steps: Schema.Array(Schema.Struct({
    kind: Schema.Literals(["activity", "deferred", "clock", "patch"]),
    name: Schema.String,
    attempt: Schema.Number,
    result: Schema.Unknown,
    /** When it was recorded (PostgreSQL's text of a `timestamptz`): the journal's order. */
    recordedAt: Schema.optional(Schema.String)
  }))
})
export type History = typeof History.Type

/** A history the code being deployed replays as its journal says. */
export interface Replayed {
  readonly workflow: string
  readonly executionId: string
  /**
   * `complete`: the code ends with a success as the journal does; `failed`: with the workflow's own
   * error; `suspended`: it went on past the journal, or waits.
   */
  readonly outcome: "complete" | "failed" | "suspended"
}

/**
 * The code being deployed cannot replay a journal at all: its payload or a recorded result no
 * longer decodes under the new schemas, or the replay dies (a defect) or never settles.
 */
export class ReplayFailed extends Schema.TaggedError<ReplayFailed>("@effect-durable/workflow/ReplayFailed")(
  "ReplayFailed",
  { workflow: Schema.String, executionId: Schema.String, reason: Schema.String }
) {
  override get message() {
    return `workflow ${this.workflow} ${this.executionId} does not replay: ${this.reason}`
  }
}

/** The code being deployed and a journal tell different stories: deploying it would stop these runs, diverged. */
export class ReplayDiverged extends Schema.TaggedError<ReplayDiverged>("@effect-durable/workflow/ReplayDiverged")(
  "ReplayDiverged",
  {
    workflow: Schema.String,
    executionId: Schema.String,
    /** What the code asked for: a new activity, or the run's end. */
    step: Schema.String,
    /** The recorded activities it had not asked for again. */
    unreached: Schema.Array(Schema.String)
  }
) {
  override get message() {
    return `workflow ${this.workflow} ${this.executionId} diverges: the code asks for ${this.step} where the journal holds ${
      this.unreached.join(", ")
    }`
  }
}

export class Replayer extends Context.Service<Replayer, {
  readonly replay: (history: unknown) => Effect.Effect<Replayed, ReplayDiverged | ReplayFailed | InvalidInput>
}>()("@effect-durable/workflow/Replayer") {}

const decodeHistory = Schema.decodeUnknownEffect(History)

/** How long one replay may take before it is a defect (a workflow stuck replaying its own journal). */
const REPLAY_TIMEOUT = "30 seconds"

export const make = (ctx: EngineContext, store: MemoryStore): Replayer["Service"] => ({
  replay: (input) =>
    Effect.gen(function*() {
      const history = yield* Effect.mapError(
        decodeHistory(input),
        (error) => new InvalidInput({ argument: "history", rule: `an execution's journal: ${error.message}` })
      )
      const registered = ctx.workflows.get(history.workflow)
      if (registered === undefined) {
        return yield* Effect.fail(
          new InvalidInput({
            argument: "history.workflow",
            rule: `a workflow registered beside the replay layer (${history.workflow} is not)`
          })
        )
      }
      const failed = (reason: string) =>
        new ReplayFailed({ workflow: history.workflow, executionId: history.executionId, reason })
      const payload = yield* Effect.exit(Codec.decodePayload(registered.workflow, history.payload))
      if (Exit.isFailure(payload)) {
        return yield* Effect.fail(failed(`its payload does not decode under the code: ${firstLine(payload.cause)}`))
      }
      yield* store.seed({
        workflow: history.workflow,
        executionId: history.executionId,
        payload: history.payload,
        steps: history.steps.map((step, i) => ({
          kind: step.kind,
          name: step.name,
          attempt: step.attempt,
          result: step.result,
          recorded: orderOf(history.steps, i)
        }))
      })
      const settled = yield* Effect.sync(() => store.inspect(history.workflow, history.executionId)).pipe(
        Effect.repeat({
          schedule: Schedule.spaced("5 millis"),
          until: (state) => state !== undefined && (state.status === "complete" || state.status === "suspended")
        }),
        Effect.timeoutOrElse({
          duration: REPLAY_TIMEOUT,
          orElse: () => Effect.fail(failed(`its run did not settle in ${REPLAY_TIMEOUT} (the log says why)`))
        })
      )
      const diverged = settled?.waits?.find((wait) => wait.kind === "diverged")
      if (diverged !== undefined && diverged.kind === "diverged") {
        return yield* Effect.fail(
          new ReplayDiverged({
            workflow: history.workflow,
            executionId: history.executionId,
            step: diverged.step,
            unreached: diverged.unreached
          })
        )
      }
      if (settled?.status !== "complete") {
        return { workflow: history.workflow, executionId: history.executionId, outcome: "suspended" as const }
      }
      const result = yield* Effect.exit(Codec.decodeWorkflowResult(registered.workflow, settled.result))
      const exit = Exit.isSuccess(result) && result.value._tag === "Complete" ? result.value.exit : undefined
      if (Exit.isFailure(result)) {
        return yield* Effect.fail(failed(`its result does not decode: ${firstLine(result.cause)}`))
      }
      // A defect: a recorded result the new schemas refuse, or the code dying on what it replays.
      if (exit !== undefined && Exit.isFailure(exit) && Cause.hasDies(exit.cause)) {
        return yield* Effect.fail(failed(`it dies: ${firstLine(exit.cause)}`))
      }
      return {
        workflow: history.workflow,
        executionId: history.executionId,
        outcome: exit !== undefined && Exit.isFailure(exit) ? "failed" as const : "complete" as const
      }
    }).pipe(
      // Live time whatever the caller's clock (a test's, that nobody moves): a replay waits on its own run only.
      Effect.provideService(Clock.Clock, Clock.Clock.defaultValue())
    )
})

const firstLine = (cause: Cause.Cause<unknown>) => Cause.pretty(cause).split("\n")[0]!.slice(0, 300)

/**
 * A step's place in the journal's order: steps recorded at the same instant (one statement)
 * share it. Without `recordedAt`, the order given.
 */
const orderOf = (steps: History["steps"], i: number): number => {
  const at = steps[i]!.recordedAt
  if (at === undefined) return i
  return steps.findIndex((step) => step.recordedAt === at)
}
