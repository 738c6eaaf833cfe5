/**
 * Waiting for the database (or a broker) to reach a state, on the live clock: the
 * TestClock of `@effect/vitest`'s `it.effect` never advances by itself, so a poll on it
 * would wait forever.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as TestClock from "effect/testing/TestClock"

/** Repeats `effect` every 20 ms until `until` holds; fails after `seconds` (default 30). */
export const eventually = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  until: (a: A) => boolean,
  seconds = 30
): Effect.Effect<A, E | Error, R> =>
  Effect.repeat(effect, { schedule: Schedule.spaced(Duration.millis(20)), until }).pipe(
    Effect.timeoutOrElse({ duration: Duration.seconds(seconds), orElse: () => Effect.fail(new Error(`condition not met in ${seconds} s`)) }),
    TestClock.withLive
  )
