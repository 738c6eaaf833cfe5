/**
 * A feed consumer's life (`Feed.run`): batch after batch; between them, a wait that an enqueue
 * on its topics cuts short at commit; a failed batch tried again with a growing backoff.
 */
import { FeedConsumerMissing, InvalidInput } from "@effect-durable/core/Errors"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type { WakeUp } from "../../Notifications.js"

/** The longest wait between two looks of a consumer chasing a message it was told of. */
const CHASE_LONGEST = Duration.seconds(1)

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
    // than `idle`: from 10 ms, doubling to at most a second, until it reads, for at most `idle`
    // in all. (Doubling without a bound, a reader held back 20 s by a transaction elsewhere in
    // the cluster looked again 20 s after it ended.)
    const waitFor = (interval: Duration.Duration) =>
      Effect.raceFirst(Effect.as(Effect.sleep(interval), "waited" as const), wakeUp)
    let backoff = idle
    let chase: { readonly interval: Duration.Duration; readonly leftMillis: number } | undefined
    const longest = Duration.min(CHASE_LONGEST, idle)
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
        yield* waitFor(chase.interval)
        const leftMillis = chase.leftMillis - Duration.toMillis(chase.interval)
        chase = leftMillis <= 0
          ? undefined
          : { interval: Duration.min(Duration.times(chase.interval, 2), longest), leftMillis }
      } else if ((yield* waitFor(idle)) === "enqueued") {
        chase = { interval: Duration.min(Duration.millis(10), idle), leftMillis: Duration.toMillis(idle) }
      }
    }
  })
