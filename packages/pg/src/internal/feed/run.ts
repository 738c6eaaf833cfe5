/**
 * A feed consumer's life (`Feed.run`): batch after batch; between them, a wait that an enqueue
 * on its topics cuts short at commit; a failed batch tried again with a growing backoff.
 */
import { FeedConsumerMissing, InvalidInput } from "@effect-durable/core/Errors"
import type * as PgClient from "@effect/sql-pg/PgClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import * as Notifications from "../../Notifications.js"

/**
 * What wakes an idle consumer: an enqueue on one of its topics, at commit, through a LISTEN
 * connection of its own for the run's scope (`Notifications`: it reconnects, and wakes the
 * consumer once each time its LISTEN is in place, since what was sent before is lost); on
 * `listenUrl` when given (behind a transaction pooler, which drops notifications), else on the
 * pool's own configuration. Never, when there is neither (not `@effect/sql-pg`'s client): the
 * consumer then polls.
 */
export const wakeUps = (
  config: Option.Option<PgClient.PgClientConfig>,
  channel: string,
  topics: ReadonlyArray<string>
): Effect.Effect<Effect.Effect<WakeUp>, never, Scope.Scope> =>
  Effect.gen(function*() {
    if (Option.isNone(config)) return Effect.never
    const mine = new Set(topics)
    const woken = yield* Queue.sliding<WakeUp>(1)
    yield* Notifications.listen(config.value, [channel], (_, payload) => {
      if (payload === "") Queue.offerUnsafe(woken, "listening")
      else if (mine.has(payload)) Queue.offerUnsafe(woken, "enqueued")
    })
    return Queue.take(woken)
  })

/** Why a consumer woke: an enqueue on its topics committed, or its LISTEN is (again) in place. */
export type WakeUp = "enqueued" | "listening"

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
