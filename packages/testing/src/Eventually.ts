/**
 * Waiting for the database (or a broker) to reach a state, on the live clock: the
 * TestClock of `@effect/vitest`'s `it.effect` never advances by itself, so a poll on it
 * would wait forever.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type * as TestClock from "effect/testing/TestClock"

/**
 * `effect` on the live clock: under a TestClock, its live one; already on a live clock, as it
 * is (Effect 4.1's `TestClock.withLive` fails when the current clock is no TestClock, so
 * nested live sections would break).
 */
export const onLiveClock = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) => {
    const clock = fiber.getRef(Clock.Clock) as Partial<TestClock.TestClock>
    return typeof clock.withLive === "function" ? clock.withLive(effect) : effect
  })

/** Repeats `effect` every 20 ms until `until` holds; fails after `seconds` (default 30). */
export const eventually = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  until: (a: A) => boolean,
  seconds = 30
): Effect.Effect<A, E | Error, R> =>
  Effect.repeat(effect, { schedule: Schedule.spaced(Duration.millis(20)), until }).pipe(
    Effect.timeoutOrElse({
      duration: Duration.seconds(seconds),
      orElse: () => Effect.fail(new Error(`condition not met in ${seconds} s`))
    }),
    onLiveClock
  )
