/**
 * A deferred with a deadline: `awaitWithin(deferred, { within })` is the deferred's value, or
 * `DeadlinePassed` once `within` has passed on the database clock, whichever comes first. The
 * deadline is a durable clock (a delayed outbox message), so it holds across crashes, restarts
 * and deploys, and a run suspended on both says so; the first of the two to be recorded wins,
 * once, for every replay after it. A late loser changes nothing: a completion after the deadline
 * is recorded and ignored; a deadline after the completion fires into the decided race (one
 * extra run) unless the execution has completed, which drops its clocks.
 *
 * Built from upstream's `DurableDeferred.raceAll` and `DurableClock.sleep` only, so it runs on
 * any `WorkflowEngine`. Effect's workflow module has no deadline of its own; a wait that can
 * never end (the approver never answers, the message that would complete it is dead) is the
 * commonest way a workflow hangs.
 *
 * @since 0.5.0
 */
import { InvalidInput } from "@effect-durable/core/Errors"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as DurableClock from "effect/workflow/DurableClock"
import * as DurableDeferred from "effect/workflow/DurableDeferred"

/** The deadline passed before the deferred was completed. */
export class DeadlinePassed extends Schema.TaggedError<DeadlinePassed>("@effect-durable/workflow/DeadlinePassed")(
  "DeadlinePassed",
  {
    /** The deferred that was awaited. */
    deferred: Schema.String,
    /** How long it was awaited, as `Duration.format` writes it. */
    within: Schema.String
  }
) {
  override get message() {
    return `deferred ${this.deferred} was not completed within ${this.within}`
  }
}

/**
 * Awaits `deferred` for at most `within` (a durable clock: its due time is the database's).
 * `name` tells two deadlines on one deferred apart within an execution (default: the
 * deferred's name); the race and the clock are named after it (`awaitWithin/<name>`,
 * `deadline/<name>`), as every step of a workflow must be, deterministically. A second wait
 * under the same name within an execution returns the first one's recorded outcome at once: give
 * each wait on one deferred its own `name` ("approval-1", "approval-2"). A `within` that
 * is not a finite duration above zero, or an empty `name`, is an `InvalidInput` naming it.
 */
export const awaitWithin = <Success extends Schema.Top, Error extends Schema.Top>(
  deferred: DurableDeferred.DurableDeferred<Success, Error>,
  options: { readonly within: Duration.Input; readonly name?: string }
) =>
  Effect.flatMap(checked(deferred.name, options), ({ name, within }) =>
    DurableDeferred.raceAll({
      name: `awaitWithin/${name}`,
      success: deferred.successSchema,
      error: Schema.Union([deferred.errorSchema, DeadlinePassed]),
      effects: [
        DurableDeferred.await(deferred),
        // Never in memory: a deadline must outlive the process that set it.
        DurableClock.sleep({ name: `deadline/${name}`, duration: within, inMemoryThreshold: Duration.zero }).pipe(
          Effect.andThen(Effect.fail(new DeadlinePassed({ deferred: deferred.name, within: Duration.format(within) })))
        )
      ]
    }))

/** The options as `awaitWithin` uses them, or the rule one breaks. */
const checked = (
  deferredName: string,
  options: { readonly within: Duration.Input; readonly name?: string }
): Effect.Effect<{ readonly name: string; readonly within: Duration.Duration }, InvalidInput> => {
  const name = options.name ?? deferredName
  const within = Option.getOrUndefined(Duration.fromInput(options.within))
  if (within === undefined || !Duration.isFinite(within) || !Duration.isGreaterThan(within, Duration.zero)) {
    return Effect.fail(new InvalidInput({ argument: "within", rule: "a finite duration greater than zero" }))
  }
  if (name.length === 0) return Effect.fail(new InvalidInput({ argument: "name", rule: "a non-empty string" }))
  return Effect.succeed({ name, within })
}
