/**
 * A LISTEN connection that stays: one `PgConnection` of its own, outside the pool, that
 * re-connects when it drops (a restart, a terminated backend, a network cut): a lost
 * connection fails its notification queue, which ends the session. Every (re)connection
 * also fires one wake-up (an empty payload), since notifications sent while it was down are
 * lost. The projector's wake-ups and a feed consumer's (`Feed.run`) come through it.
 *
 * @since 0.2.0
 */
import { printable } from "@effect-durable/core/Printable"
import type * as PgClient from "@effect/sql-pg/PgClient"
import * as PgConnection from "@effect/sql-pg/PgConnection"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import type { SqlError } from "effect/sql/SqlError"

/** The `application_name` of every LISTEN connection. */
export const APPLICATION_NAME = "effect-durable-listener"

/**
 * One connection, from connect to loss: LISTENs on every channel, hands each an empty payload
 * when the LISTEN is in place (notifications sent while it was down are lost), then hands over
 * each notification with its channel. It only ends by failing.
 */
const session = (
  config: PgClient.PgClientConfig,
  channels: ReadonlyArray<string>,
  onNotify: (channel: string, payload: string) => void
): Effect.Effect<never, SqlError> =>
  Effect.scoped(Effect.gen(function*() {
    const connection = yield* PgConnection.make({
      ...config,
      applicationName: APPLICATION_NAME,
      connectTimeout: config.connectTimeout ?? Duration.seconds(10),
      // A LISTEN session of its own: no statements to share it with.
      multiplex: false
    })
    // Every LISTEN on one pinned view of the session (each `listen` of the connection itself
    // would pin it anew, and wait for the first one's pin forever).
    const pinned = yield* connection.pin
    const queues = yield* Effect.forEach(channels, (channel) => pinned.listen(channel))
    for (const channel of channels) onNotify(channel, "")
    return yield* Effect.raceAll(queues.map((notifications, i) =>
      Effect.forever(Effect.map(Queue.take(notifications), (notification) =>
        onNotify(channels[i]!, notification.payload)))
    ))
  }))

/** Reconnects: 50 ms doubling, capped at 5 s; a connection that came up starts over. */
const reconnect = Schedule.min([Schedule.exponential(Duration.millis(50)), Schedule.spaced(Duration.seconds(5))])

/** Listens on `channels` until the scope closes, reconnecting with a capped backoff. */
export const listen = (
  config: PgClient.PgClientConfig,
  channels: ReadonlyArray<string>,
  onNotify: (channel: string, payload: string) => void
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    let backoff = yield* Schedule.toStepWithSleep(reconnect)
    while (true) {
      let connected = false
      const lost = yield* Effect.flip(session(config, channels, (channel, payload) => {
        connected = true
        onNotify(channel, payload)
      }))
      // A fresh step function is a schedule started over.
      if (connected) backoff = yield* Schedule.toStepWithSleep(reconnect)
      yield* Effect.logDebug(
        `effect-durable: listen connection lost (${printable(lost.message)}); reconnecting`
      )
      yield* Effect.ignore(backoff(lost))
    }
  }).pipe(Effect.forkScoped, Effect.asVoid)

/**
 * What wakes an idle reader of the outbox (a feed consumer, a relay): an enqueue on one of its
 * topics, at commit, through a LISTEN connection of its own for the scope (`listen`: it
 * reconnects, and wakes the reader once each time its LISTEN is in place, since what was sent
 * before is lost); on `listenUrl` when given (behind a transaction pooler, which drops
 * notifications), else on the pool's own configuration. Never, when there is neither (not `@effect/sql-pg`'s client): the
 * reader then polls.
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
    yield* listen(config.value, [channel], (_, payload) => {
      if (payload === "") Queue.offerUnsafe(woken, "listening")
      else if (mine.has(payload)) Queue.offerUnsafe(woken, "enqueued")
    })
    return Queue.take(woken)
  })

/** Why a reader woke: an enqueue on its topics committed, or its LISTEN is (again) in place. */
export type WakeUp = "enqueued" | "listening"
