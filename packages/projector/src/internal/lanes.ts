/**
 * Publishing a claimed batch on lanes: at most `concurrency` fibers across all batches in
 * flight, each taking the next message in turn, so a batch costs `concurrency` fibers, not
 * one per message. The keeper cuts a publish past its deadline by interrupting its lane (no
 * timeout race per message); a fresh lane carries on with the rest.
 */
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Semaphore from "effect/Semaphore"
import { permanent, type Publish, type PublishError, retryable } from "../Publisher.js"
import type { Delivery } from "./delivery.js"
import type { Settings } from "./options.js"
import { deliverySpan } from "./telemetry.js"

/** What a publish fiber's exit means for its message. */
const publishOutcome = (exit: Exit.Exit<void, PublishError>): Result.Result<void, PublishError> =>
  Exit.isSuccess(exit)
    ? Result.void
    : Result.fail(Option.getOrElse(
      Cause.findErrorOption(exit.cause),
      () => retryable(`the publisher died: ${Cause.pretty(exit.cause).slice(0, 500)}`)
    ))

/** The lanes of one projector: they share `concurrency` permits across all its batches. */
export const makeLanes = (
  settings: Settings,
  session: <A, E>(use: (publish: Publish) => Effect.Effect<A, E>) => Effect.Effect<A, E>
) =>
  Effect.map(Semaphore.make(settings.concurrency), (permits) => {
    const deliveryTimeoutMillis = Duration.toMillis(settings.deliveryTimeout)

    // A payload that does not decode with its topic's schema is dead at once, never published.
    const checkPayload = (message: OutboxWorker.OutboxMessage): Result.Result<void, string> => {
      const schema = settings.schemas[message.topic]
      if (schema === undefined) return Result.void
      return Result.mapBoth(Schema.decodeUnknownResult(schema)(message.payload), {
        onFailure: (error) => `payload does not decode: ${error.message.slice(0, 500)}`,
        onSuccess: () => undefined
      })
    }

    /**
     * Publishes every message of a batch and returns each one's result, in order. A lane cut
     * just as its publish finished may take the next message down with it: that one is
     * released for a retry (at least once, never lost).
     */
    const publishAll = Effect.fnUntraced(
      function*(claimed: ReadonlyArray<OutboxWorker.OutboxMessage>, delivery: Delivery, spans: boolean) {
        const results: Array<Result.Result<void, PublishError> | undefined> = new Array(claimed.length)
        /** The message each lane is publishing (-1: none). */
        const current: Array<number> = []
        let next = 0
        const settle = (i: number, result: Result.Result<void, PublishError>) => {
          results[i] = result
          delivery.finished(i, Result.isSuccess(result))
        }
        const lane = (id: number) =>
          session((publish) =>
            Effect.withFiber<void>((fiber) => {
              const clock = fiber.getRef(Clock.Clock)
              const step = (): Effect.Effect<void> => {
                current[id] = -1
                if (next >= claimed.length) return Effect.void
                const i = next++
                const message = claimed[i]!
                if (!delivery.mayStart(message.id)) {
                  delivery.skip(message.id)
                  settle(i, Result.fail(retryable("not started: the lease was lost or in doubt")))
                  return Effect.suspend(step)
                }
                const decoded = checkPayload(message)
                if (Result.isFailure(decoded)) {
                  settle(i, Result.fail(permanent(decoded.failure)))
                  return Effect.suspend(step)
                }
                current[id] = i
                delivery.started(message.id, fiber, clock.currentTimeMillisUnsafe() + deliveryTimeoutMillis)
                const publishing = spans ? deliverySpan(message, publish(message)) : publish(message)
                return Effect.flatMap(Effect.exit(publishing), (exit) => {
                  settle(i, publishOutcome(exit))
                  return step()
                })
              }
              return step()
            })
          )
        const ended = yield* Queue.unbounded<number>()
        let lanes = 0
        let running = 0
        const startLane = Effect.suspend(() => {
          const id = lanes++
          running++
          // A lane holds a permit while it runs: lanes across all batches are at most `concurrency`.
          return Effect.forkChild(Effect.onExit(permits.withPermits(1)(lane(id)), () => Queue.offer(ended, id)))
        })
        for (let k = 0; k < Math.min(settings.concurrency, claimed.length); k++) yield* startLane
        while (running > 0) {
          const id = yield* Queue.take(ended)
          running--
          const i = current[id] ?? -1
          if (i >= 0 && results[i] === undefined) {
            // The lane was cut mid-publish.
            settle(
              i,
              Result.fail(retryable(
                delivery.timedOut(claimed[i]!.id)
                  ? `delivery timed out after ${Duration.format(settings.deliveryTimeout)}`
                  : "delivery interrupted with a timed-out one on its lane"
              ))
            )
          }
          if (next < claimed.length) yield* startLane
        }
        return results as Array<Result.Result<void, PublishError>>
      }
    )

    return { publishAll }
  })
