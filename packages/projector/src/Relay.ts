/**
 * The relay: the outbox's messages on some topics, published through the `Publisher` in the
 * order their transactions committed, as PostgreSQL's logical decoding hands them over
 * (`@effect-durable/pg/OutboxLog`). For teams that already run a log: with the JetStream
 * publisher (`@effect-durable/nats`), the stream holds the topics' messages in commit order,
 * each once (a message published again after a crash carries the same `Nats-Msg-Id`).
 *
 * One relay publishes a slot at a time (another process with the same slot waits, ready to take
 * over). A message is published while it is open and settled after; a publish that asks to be
 * tried again stops the relay there (nothing overtakes it) until it goes through. A relayed
 * topic is not also given to a projector: a message a projector has claimed is left to it.
 * A message's delay (`availableAt`) and a topic's pause are the projector's: the relay
 * publishes at commit.
 *
 * @since 0.2.0
 */
import type { DatabaseError, InvalidInput, LogicalDecodingUnavailable } from "@effect-durable/core/Errors"
import { RelaySlotLost } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import { printable } from "@effect-durable/core/Printable"
import type { DurableSettings } from "@effect-durable/pg/DurableConfig"
import { wakeUps } from "@effect-durable/pg/Notifications"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxLog from "@effect-durable/pg/OutboxLog"
import type { OutboxMessage } from "@effect-durable/pg/OutboxWorker"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import type * as SqlClient from "effect/sql/SqlClient"
import { Publisher, type PublishError } from "./Publisher.js"

export interface RelayOptions {
  /** The replication slot, the relay's own (a lowercase identifier). Made, with the outbox's publication, when missing. */
  readonly slot: string
  /** The topics it publishes (1 to 100). */
  readonly topics: ReadonlyArray<string>
  /** About how many changes one step reads from the slot (1-10,000; default 1000; a transaction is never split). */
  readonly limit?: number
  /**
   * How long an idle relay waits before it reads the slot again; default 100 milliseconds. An
   * enqueue on its topics wakes it at commit (a LISTEN of its own, on `listenUrl` when given).
   */
  readonly idle?: Duration.Input
  readonly listenUrl?: Redacted.Redacted<string>
  /**
   * While idle, how often it writes an empty transaction into the slot's stream to advance
   * past the WAL the rest of the database wrote meanwhile; default 10 seconds.
   */
  readonly heartbeat?: Duration.Input
  /** The longest wait before a failed step is tried again (doubling from `idle`); default 30 seconds. */
  readonly maxBackoff?: Duration.Input
}

const decodeIdle = Input.argument("idle", Input.DurationIn({ min: "1 millis", max: "1 hour" }))
const decodeHeartbeat = Input.argument("heartbeat", Input.DurationIn({ min: "10 millis", max: "1 day" }))
const decodeBackoff = Input.argument("maxBackoff", Input.DurationIn({ min: "1 millis", max: "1 day" }))

/** A publish's outcome as the relay settles it: a retryable failure stops the relay before the message. */
const outcomeOf = (message: OutboxMessage) =>
  Effect.flatMap(Publisher, (publisher) => publisher.publish(message)).pipe(
    Effect.as<OutboxLog.Outcome>({ _tag: "Delivered" }),
    Effect.catch((error: PublishError): Effect.Effect<OutboxLog.Outcome> =>
      Effect.succeed(
        !error.retryable
          ? { _tag: "Dead", reason: error.reason }
          : error.retryAfterMillis === undefined
          ? { _tag: "Retry", reason: error.reason }
          : { _tag: "Retry", reason: error.reason, afterMillis: error.retryAfterMillis }
      )
    ),
    Effect.catchDefect((defect) =>
      Effect.succeed<OutboxLog.Outcome>({ _tag: "Retry", reason: printable(String(defect)) })
    )
  )

/** A step's outcome; a defect (a bug, a message the decoder could not read) is a failure to log and retry, not the relay's end. */
const attempt = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.result(Effect.catchDefect(effect, (defect) => Effect.fail(defect as E | unknown)))

export type RelayError = LogicalDecodingUnavailable | InvalidInput | DatabaseError

/**
 * Relays in the layer's scope: makes the slot and the publication when missing (failing the
 * layer, typed, when the server cannot decode), publishes what was open before the slot
 * existed, then follows the slot until the scope closes.
 */
export const layer = (
  options: RelayOptions
): Layer.Layer<never, RelayError, Publisher | SqlClient.SqlClient | DurableSettings | Outbox.Outbox> =>
  Layer.effectDiscard(Effect.flatMap(start(options), Effect.forkScoped))

/** Makes the slot (a typed failure when it cannot be), then returns the relay's loop, to run for as long as it should. */
export const start = Effect.fnUntraced(function*(options: RelayOptions) {
  const idle = yield* decodeIdle(options.idle ?? "100 millis")
  const heartbeat = yield* decodeHeartbeat(options.heartbeat ?? "10 seconds")
  const maxBackoff = yield* decodeBackoff(options.maxBackoff ?? "30 seconds")
  const log = yield* OutboxLog.make
  const publish = {
    topics: options.topics,
    publish: outcomeOf,
    ...(options.limit === undefined ? {} : { limit: options.limit })
  }
  const { slot } = options
  // The topics and the step size are checked now: bad ones fail the start, not the loop.
  yield* OutboxLog.decodeStepOptions(publish)
  const ensured = yield* log.ensure(slot, options.topics)
  const pg = yield* Effect.serviceOption(PgClient.PgClient)
  const { channel } = yield* Outbox.Outbox
  const listenConfig = options.listenUrl !== undefined
    ? Option.some<PgClient.PgClientConfig>({ url: options.listenUrl })
    : Option.map(pg, (client) => client.config)

  const warn = (what: string, error: unknown) =>
    Effect.logWarning(`effect-durable relay ${slot}: ${what}`).pipe(
      Effect.annotateLogs({ slot, error: printable(error instanceof Error ? error.message : String(error)) })
    )

  return Effect.gen(function*() {
    const wakeUp = yield* wakeUps(listenConfig, channel, options.topics)
    const waitFor = (interval: Duration.Duration) => Effect.raceFirst(Effect.sleep(interval), Effect.asVoid(wakeUp))
    let backoff = idle
    const failed = (what: string, error: unknown, atLeast = 0) =>
      Effect.gen(function*() {
        yield* warn(`${what}; tried again in ${Duration.format(backoff)}`, error)
        yield* Effect.sleep(Duration.max(backoff, Duration.millis(atLeast)))
        backoff = Duration.min(Duration.times(backoff, 2), maxBackoff)
      })
    // What is open and was never in the slot's stream: published from the table first.
    let sweep = ensured.sweep
    let beatAt = yield* Clock.currentTimeMillis
    while (true) {
      if (sweep) {
        const swept = yield* attempt(
          Effect.tap(
            log.sweep(slot, publish),
            (done) => done.busy || done.retry !== null ? Effect.void : log.swept(slot, options.topics)
          )
        )
        if (swept._tag === "Failure") {
          yield* failed("publishing the open messages failed", swept.failure)
          continue
        }
        if (swept.success.busy) {
          yield* waitFor(idle)
          continue
        }
        if (swept.success.retry !== null) {
          yield* failed(
            `message ${swept.success.retry.id} was not published`,
            swept.success.retry.reason,
            swept.success.retry.afterMillis
          )
          continue
        }
        yield* Effect.logInfo(
          `effect-durable relay ${slot}: published ${swept.success.delivered} open message(s) from the table`
        )
        sweep = false
      }
      const stepped = yield* attempt(log.step(slot, publish))
      if (stepped._tag === "Failure") {
        const error = stepped.failure
        if (error instanceof RelaySlotLost) {
          // Nothing is lost: what it had not relayed is open in the table. A new slot, then the sweep.
          yield* Effect.logError(`effect-durable relay ${slot}: ${error.message}; making it again`)
          const remade = yield* attempt(Effect.andThen(log.drop(slot), log.ensure(slot, options.topics)))
          if (remade._tag === "Failure") yield* failed("making the slot again failed", remade.failure)
          else sweep = true
          continue
        }
        yield* failed("a step failed", error)
        continue
      }
      const step = stepped.success
      if (step.retry !== null) {
        yield* failed(`message ${step.retry.id} was not published`, step.retry.reason, step.retry.afterMillis)
        continue
      }
      backoff = idle
      if (step.transactions > 0) continue
      const now = yield* Clock.currentTimeMillis
      if (!step.busy && now - beatAt >= Duration.toMillis(heartbeat)) {
        beatAt = now
        yield* log.heartbeat.pipe(
          Effect.catch((error) => Effect.logDebug(`effect-durable relay ${slot}: a heartbeat failed: ${error.message}`))
        )
        continue
      }
      yield* waitFor(idle)
    }
  }).pipe(Effect.scoped)
})
