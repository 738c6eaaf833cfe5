/**
 * A feed consumer's life (`Feed.run`): batch after batch; between them, a wait that an enqueue
 * on its topics cuts short at commit; a failed batch tried again with a growing backoff.
 */
import { FeedConsumerMissing, InvalidInput } from "@effect-durable/core/Errors"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type { WakeUp } from "../../Notifications.js"

export const runLoop = <E, R>(options: {
  readonly name: string
  /** One batch: how many it read. */
  readonly consume: Effect.Effect<number, E, R>
  readonly wakeUp: Effect.Effect<WakeUp>
  readonly idle: Duration.Duration
  readonly maxBackoff: Duration.Duration
  readonly limit: number
}): Effect.Effect<never, FeedConsumerMissing | InvalidInput, R> =>
  Effect.gen(function*() {
    const { idle, limit, maxBackoff, name, wakeUp } = options
    // Woken, it reads at once; woken by an enqueue and finding nothing (the message waits
    // behind an older transaction, which ends without a notification), it looks again sooner
    // than `idle`, from 10 ms doubling, until it reads or the interval reaches `idle`.
    const waitFor = (interval: Duration.Duration) =>
      Effect.raceFirst(Effect.as(Effect.sleep(interval), "waited" as const), wakeUp)
    let backoff = idle
    let chase: Duration.Duration | undefined
    while (true) {
      const outcome = yield* options.consume.pipe(
        Effect.map((read) => ({ read, failed: false })),
        Effect.catch((error: unknown) =>
          error instanceof FeedConsumerMissing || error instanceof InvalidInput
            ? Effect.fail(error)
            : Effect.as(
              Effect.logWarning(
                `effect-durable: feed consumer ${name}: a batch failed, retried in ${Duration.format(backoff)}`
              ).pipe(Effect.annotateLogs({ consumer: name, error: String(error) })),
              { read: 0, failed: true }
            )
        )
      )
      if (outcome.failed) {
        yield* Effect.sleep(backoff)
        backoff = Duration.min(Duration.times(backoff, 2), maxBackoff)
        continue
      }
      backoff = idle
      if (outcome.read > 0) chase = undefined
      if (outcome.read >= limit) continue
      if (chase !== undefined) {
        yield* waitFor(chase)
        const next = Duration.times(chase, 2)
        chase = Duration.isGreaterThanOrEqualTo(next, idle) ? undefined : next
      } else if ((yield* waitFor(idle)) === "enqueued") {
        chase = Duration.min(Duration.millis(10), idle)
      }
    }
  })
