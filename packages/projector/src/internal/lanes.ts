/**
 * Publishing a claimed batch on lanes: at most `concurrency` fibers across all batches in
 * flight, each taking the next unit in turn — a message, or a keyed run (the messages of one
 * ordering key, in id order, one after the other on one lane) — so a batch costs
 * `concurrency` fibers, not one per message. A run stops at its first message that does not
 * succeed: the rest of it is held back unstarted, so none overtakes the one that failed. The
 * keeper cuts a publish past its deadline by interrupting its lane (no timeout race per
 * message); a fresh lane carries on with the next unit.
 *
 * A publisher that takes batches (`Publisher.batch`) gets units of its own: a topic's messages
 * packed up to `maxSize` per call, a key's run never split, and an outcome per message.
 */
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import type * as Arr from "effect/Array"
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
import {
  type Batching,
  BatchOutcome,
  permanent,
  type Publish,
  type PublishBatch,
  type PublishError,
  retryable
} from "../Publisher.js"
import type { Delivery } from "./delivery.js"
import type { Settings } from "./options.js"
import { batchSpan, deliverySpan } from "./telemetry.js"

/** What a publish fiber's exit means for its message. */
const publishOutcome = (exit: Exit.Exit<void, PublishError>): Result.Result<void, PublishError> =>
  Exit.isSuccess(exit)
    ? Result.void
    : Result.fail(Option.getOrElse(
      Cause.findErrorOption(exit.cause),
      () => retryable(`the publisher died: ${Cause.pretty(exit.cause).slice(0, 500)}`)
    ))

/**
 * The batch's units, in the order of their first message: each message without a key alone,
 * the messages of one key together (the claim hands out a key's run in id order).
 */
const unitsOf = (claimed: ReadonlyArray<OutboxWorker.OutboxMessage>): ReadonlyArray<ReadonlyArray<number>> => {
  const units: Array<Array<number>> = []
  const byKey = new Map<string, Array<number>>()
  for (const [i, message] of claimed.entries()) {
    if (message.orderingKey === null) {
      units.push([i])
      continue
    }
    const run = byKey.get(message.orderingKey)
    if (run !== undefined) run.push(i)
    else {
      const started = [i]
      byKey.set(message.orderingKey, started)
      units.push(started)
    }
  }
  return units
}

/**
 * A batch publisher's units: each topic's units packed in order into batches of at most
 * `maxSize` messages, a key's run whole in one batch (so no two lanes hold one key). What a
 * run has beyond `maxSize` (the claim's `perKey` is capped at it, so only a bug would) or past
 * a message of another topic (ordering keys are not per topic) is `spill`, given back unstarted.
 */
const batchesOf = (claimed: ReadonlyArray<OutboxWorker.OutboxMessage>, maxSize: number) => {
  const units: Array<Array<number>> = []
  const open = new Map<string, Array<number>>()
  const spill: Array<number> = []
  for (const unit of unitsOf(claimed)) {
    const topic = claimed[unit[0]!]!.topic
    // A key shared by two topics: the run stops at the first message of another topic (one
    // topic per call), the rest given back and claimed again after it.
    const otherTopic = unit.findIndex((i) => claimed[i]!.topic !== topic)
    const end = Math.min(maxSize, otherTopic === -1 ? unit.length : otherTopic)
    const whole = unit.slice(0, end)
    spill.push(...unit.slice(end))
    let batch = open.get(topic)
    if (batch === undefined || batch.length + whole.length > maxSize) {
      open.set(topic, batch = [])
      units.push(batch)
    }
    batch.push(...whole)
  }
  return { units, spill }
}

/** How a dead letter's reason starts when its payload did not decode with its topic's schema. */
export const PAYLOAD_DOES_NOT_DECODE = "payload does not decode"

const heldBack = () => retryable("not started: an earlier message of its ordering key did not succeed")

/** The lanes of one projector: they share `concurrency` permits across all its batches. */
export const makeLanes = (
  settings: Settings,
  session: <A, E>(use: (publish: Publish) => Effect.Effect<A, E>) => Effect.Effect<A, E>,
  batch: Batching | undefined
) =>
  Effect.map(Semaphore.make(settings.concurrency), (permits) => {
    const deliveryTimeoutMillis = Duration.toMillis(settings.deliveryTimeout)

    // A payload that does not decode with its topic's schema is dead at once, never published.
    const checkPayload = (message: OutboxWorker.OutboxMessage): Result.Result<void, string> => {
      // Its own key only: a topic named `constructor` has no schema, whatever Object has.
      if (!Object.hasOwn(settings.schemas, message.topic)) return Result.void
      const schema = settings.schemas[message.topic]
      if (schema === undefined) return Result.void
      return Result.mapBoth(Schema.decodeUnknownResult(schema)(message.payload), {
        onFailure: (error) => `${PAYLOAD_DOES_NOT_DECODE}: ${error.message.slice(0, 500)}`,
        onSuccess: () => undefined
      })
    }

    /**
     * Publishes every message of a batch and returns each one's result, in order. A lane cut
     * just as its publish finished may take the next message of its unit down with it: that
     * one is held back for a retry (at least once, never lost).
     */
    const publishAll = Effect.fnUntraced(
      function*(claimed: ReadonlyArray<OutboxWorker.OutboxMessage>, delivery: Delivery, spans: boolean) {
        const results: Array<Result.Result<void, PublishError> | undefined> = new Array(claimed.length)
        const { spill, units } = batch === undefined ? { units: unitsOf(claimed), spill: [] } : batchesOf(
          claimed,
          batch.maxSize
        )
        /** The messages each lane is publishing (none: empty), its unit and the next position in it. */
        const current: Array<ReadonlyArray<number>> = []
        const unitOfLane: Array<number> = []
        const positionOfLane: Array<number> = []
        let nextUnit = 0
        // The batch's clock, the one its leases were timed with (the publisher's session may run
        // its lanes under a context of its own).
        const clock = yield* Clock.clockWith(Effect.succeed)
        const settle = (i: number, result: Result.Result<void, PublishError>) => {
          results[i] = result
          delivery.finished(i, Result.isSuccess(result))
        }
        /** Left unstarted (or its outcome set aside) behind its key: given back, no attempt counted. */
        const holdBack = (i: number) => {
          delivery.holdBack(claimed[i]!.id)
          settle(i, Result.fail(heldBack()))
        }
        /** The rest of a lane's unit stays unstarted: given back after the batch, never counted. */
        const holdBackRest = (lane: number) => {
          const unit = units[unitOfLane[lane]!]
          if (unit === undefined) return
          for (let p = positionOfLane[lane]!; p < unit.length; p++) {
            const i = unit[p]!
            if (results[i] !== undefined) continue
            holdBack(i)
          }
          positionOfLane[lane] = unit.length
        }
        for (const i of spill) holdBack(i)
        /** Why a message may not be published now, if it may not (its lease, its payload). */
        const refusal = (message: OutboxWorker.OutboxMessage): PublishError | undefined => {
          if (!delivery.mayStart(message.id, clock.currentTimeMillisUnsafe())) {
            delivery.skip(message.id)
            return retryable("not started: the lease was lost or in doubt")
          }
          const decoded = checkPayload(message)
          return Result.isFailure(decoded) ? permanent(decoded.failure) : undefined
        }
        /**
         * A batch's lane: each unit in one call. A message of a key after one of its key that
         * did not succeed (refused before the call, or failed in it) is held back, not marked,
         * whatever the handler did with it: it is delivered again after that one.
         */
        const batchLane = (id: number, publish: PublishBatch) =>
          Effect.withFiber<void>((fiber) => {
            const step = (): Effect.Effect<void> => {
              current[id] = []
              if (nextUnit >= units.length) return Effect.void
              unitOfLane[id] = nextUnit
              const unit = units[nextUnit++]!
              positionOfLane[id] = unit.length
              const failedKeys = new Set<string>()
              const failed = (message: OutboxWorker.OutboxMessage) => {
                if (message.orderingKey !== null) failedKeys.add(message.orderingKey)
              }
              const behindFailed = (i: number) => {
                const key = claimed[i]!.orderingKey
                if (key === null || !failedKeys.has(key)) return false
                holdBack(i)
                return true
              }
              const sent: Array<number> = []
              for (const i of unit) {
                if (behindFailed(i)) continue
                const refused = refusal(claimed[i]!)
                if (refused === undefined) sent.push(i)
                else {
                  settle(i, Result.fail(refused))
                  failed(claimed[i]!)
                }
              }
              if (sent.length === 0) return Effect.suspend(step)
              current[id] = sent
              const deadline = clock.currentTimeMillisUnsafe() + deliveryTimeoutMillis
              for (const i of sent) delivery.started(claimed[i]!.id, fiber, deadline, { shared: true })
              const messages = sent.map((i) => claimed[i]!) as unknown as Arr.NonEmptyReadonlyArray<
                OutboxWorker.OutboxMessage
              >
              const call = publish(messages)
              return Effect.flatMap(Effect.exit(spans ? batchSpan(messages, call) : call), (exit) => {
                const whole = Exit.isSuccess(exit) ? undefined : publishOutcome(Exit.asVoid(exit))
                const failures = Exit.isSuccess(exit) && exit.value instanceof BatchOutcome
                  ? exit.value.failures
                  : new Map<string, PublishError>()
                const named = sent.filter((i) => failures.has(claimed[i]!.id)).length
                for (const i of sent) {
                  if (behindFailed(i)) continue
                  const message = claimed[i]!
                  const error = failures.get(message.id)
                  const outcome = whole ?? (error === undefined ? Result.void : Result.fail(error))
                  settle(i, outcome)
                  if (Result.isFailure(outcome)) failed(message)
                }
                return named === failures.size ? step() : Effect.andThen(
                  Effect.logWarning(
                    `effect-durable projector: a batch handler named ${
                      failures.size - named
                    } failed messages that were not in its batch of ${sent.length}; ignored`
                  ),
                  step
                )
              })
            }
            return step()
          })
        const lane = (id: number) =>
          batch !== undefined ? batchLane(id, batch.publish) : session((publish) =>
            Effect.withFiber<void>((fiber) => {
              const step = (): Effect.Effect<void> => {
                current[id] = []
                let unit = units[unitOfLane[id]!]
                if (unit === undefined || positionOfLane[id]! >= unit.length) {
                  if (nextUnit >= units.length) return Effect.void
                  unitOfLane[id] = nextUnit
                  positionOfLane[id] = 0
                  unit = units[nextUnit++]!
                }
                const position = positionOfLane[id]!++
                const i = unit[position]!
                const message = claimed[i]!
                // A run goes on only while every earlier message of it still holds its lease: one
                // lost mid-publish may be delivered again by its new holder, and nothing of its
                // key may overtake that.
                if (position > 0 && unit.slice(0, position).some((j) => delivery.isStale(claimed[j]!.id))) {
                  positionOfLane[id] = position
                  holdBackRest(id)
                  return Effect.suspend(step)
                }
                const refused = refusal(message)
                if (refused !== undefined) {
                  settle(i, Result.fail(refused))
                  holdBackRest(id)
                  return Effect.suspend(step)
                }
                current[id] = [i]
                delivery.started(message.id, fiber, clock.currentTimeMillisUnsafe() + deliveryTimeoutMillis)
                const publishing = spans ? deliverySpan(message, publish(message)) : publish(message)
                return Effect.flatMap(Effect.exit(publishing), (exit) => {
                  const outcome = publishOutcome(exit)
                  settle(i, outcome)
                  if (Result.isFailure(outcome)) holdBackRest(id)
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
          unitOfLane[id] = -1
          positionOfLane[id] = 0
          // A lane holds a permit while it runs: lanes across all batches are at most `concurrency`.
          return Effect.forkChild(Effect.onExit(permits.withPermits(1)(lane(id)), () => Queue.offer(ended, id)))
        })
        for (let k = 0; k < Math.min(settings.concurrency, units.length); k++) yield* startLane
        while (running > 0) {
          const id = yield* Queue.take(ended)
          running--
          // Keys of the cut call whose first unsettled message failed: the rest of each is held
          // back (given back without an attempt), as behind any failure of its key.
          const cutKeys = new Set<string>()
          for (const i of current[id] ?? []) {
            if (results[i] !== undefined) continue
            const key = claimed[i]!.orderingKey
            if (key !== null && cutKeys.has(key)) {
              holdBack(i)
              continue
            }
            if (key !== null) cutKeys.add(key)
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
          holdBackRest(id)
          if (nextUnit < units.length) yield* startLane
        }
        return results as Array<Result.Result<void, PublishError>>
      }
    )

    return { publishAll }
  })
