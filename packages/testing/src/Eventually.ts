/**
 * Waiting for the database (or a broker) to reach a state, on the live clock: the
 * TestClock of `@effect/vitest`'s `it.effect` never advances by itself, so a poll on it
 * would wait forever.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as TestServices from "effect/TestServices"

/** Repeats `effect` every 20 ms until `until` holds; fails after `seconds` (default 30). */
export const eventually = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  until: (a: A) => boolean,
  seconds = 30
): Effect.Effect<A, E | Error, R> => {
  const loop: Effect.Effect<A, E, R> = Effect.flatMap(
    effect,
    (a) => until(a) ? Effect.succeed(a) : Effect.zipRight(Effect.sleep("20 millis"), Effect.suspend(() => loop))
  )
  return loop.pipe(
    Effect.timeoutFail({ duration: `${seconds} seconds`, onTimeout: () => new Error(`condition not met in ${seconds} s`) }),
    TestServices.provideLive
  )
}
