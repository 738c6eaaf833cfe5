/**
 * Replays of journals taken from elsewhere (a database, the CLI's `workflows show --json`)
 * against the code being deployed, on the engine in replay mode (`PgWorkflowEngine.layerReplay`):
 * each history is seeded into the in-memory store and run once. Recorded steps answer from the
 * journal, nothing past it runs (a new step, a child: the run stops there, suspended), and what
 * the run became says whether the code agrees with the journal (`replay.ts`).
 */
import { InvalidInput } from "@effect-durable/core/Errors"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
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
  /** `complete`: the code ends as the journal does; `suspended`: it went on past the journal, or waits. */
  readonly outcome: "complete" | "suspended"
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
  readonly replay: (history: unknown) => Effect.Effect<Replayed, ReplayDiverged | InvalidInput>
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
      if (!ctx.workflows.has(history.workflow)) {
        return yield* Effect.fail(
          new InvalidInput({
            argument: "history.workflow",
            rule: `a workflow registered beside the replay layer (${history.workflow} is not)`
          })
        )
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
          orElse: () =>
            Effect.die(`WorkflowReplay: ${history.workflow} ${history.executionId} did not settle in ${REPLAY_TIMEOUT}`)
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
      return {
        workflow: history.workflow,
        executionId: history.executionId,
        outcome: settled?.status === "complete" ? "complete" as const : "suspended" as const
      }
    }).pipe(
      // Live time whatever the caller's clock (a test's, that nobody moves): a replay waits on its own run only.
      Effect.provideService(Clock.Clock, Clock.Clock.defaultValue())
    )
})

/**
 * A step's place in the journal's order: steps recorded at the same instant (one statement)
 * share it. Without `recordedAt`, the order given.
 */
const orderOf = (steps: History["steps"], i: number): number => {
  const at = steps[i]!.recordedAt
  if (at === undefined) return i
  return steps.findIndex((step) => step.recordedAt === at)
}
