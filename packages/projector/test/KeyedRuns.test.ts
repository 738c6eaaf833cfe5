import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import { eventually, freshName, outboxRows, projectedCount, substrate, withLayerLive } from "./support.js"

/** The outbox worker in context, with every non-empty claim's size recorded. */
const countingClaims = Effect.map(OutboxWorker.OutboxWorker, (worker) => {
  const sizes: Array<number> = []
  const watched = OutboxWorker.OutboxWorker.of({
    ...worker,
    claim: (options) =>
      worker.claim(options).pipe(
        Effect.onExit((exit) =>
          Effect.sync(() => {
            if (Exit.isSuccess(exit) && exit.value.length > 0) sizes.push(exit.value.length)
          })
        )
      )
  })
  return { sizes, watched }
})

describe("Projector: keyed runs", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("a key's backlog is delivered from one claim per batch, in order, one message at a time", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshName("runs")
        const key = `${topic}-customer`
        const ids = yield* outbox.enqueueMany(
          Array.from({ length: 250 }, (_, seq) => ({ topic, payload: { seq }, options: { orderingKey: key } }))
        )
        const { sizes, watched } = yield* countingClaims
        const order: Array<number> = []
        let inFlight = 0
        let most = 0
        const publisher = Publisher.layerHandler((message) =>
          Effect.gen(function*() {
            most = Math.max(most, ++inFlight)
            order.push((message.payload as { seq: number }).seq)
            yield* Effect.yieldNow
            inFlight--
          })
        )
        yield* withLayerLive(
          Projector.layer({ topics: [topic], batchSize: 100, batchesInFlight: 2, pollInterval: "20 millis" }).pipe(
            Layer.provide(publisher)
          ),
          eventually(projectedCount(ids), (n) => n === ids.length, 60)
        ).pipe(Effect.provideService(OutboxWorker.OutboxWorker, watched))
        expect(order).toEqual(Array.from({ length: 250 }, (_, seq) => seq))
        expect(most).toBe(1)
        // 250 messages of one key in batches of 100: three claims, not 250.
        expect(sizes).toEqual([100, 100, 50])
      }))

    it.effect(
      "a failure inside a keyed run holds the rest of it back unstarted: none overtakes the failed one, no attempt is counted for them",
      () =>
        Effect.gen(function*() {
          const outbox = yield* Outbox.Outbox
          const topic = freshName("runs")
          const key = `${topic}-customer`
          const ids = yield* outbox.enqueueMany(
            Array.from({ length: 10 }, (_, seq) => ({ topic, payload: { seq }, options: { orderingKey: key } }))
          )
          const order: Array<number> = []
          let failed = false
          const publisher = Publisher.layerHandler((message) =>
            Effect.suspend(() => {
              const { seq } = message.payload as { seq: number }
              order.push(seq)
              if (seq === 3 && !failed) {
                failed = true
                return Effect.fail(Publisher.retryable("the customer's service is down"))
              }
              return Effect.void
            })
          )
          yield* withLayerLive(
            Projector.layer({
              topics: [topic],
              pollInterval: "20 millis",
              backoff: { min: "50 millis", max: "100 millis" }
            })
              .pipe(Layer.provide(publisher)),
            Effect.gen(function*() {
              const projector = yield* Projector.Projector
              // The totals count a batch once it is settled, after its marks.
              const totals = yield* eventually(projector.counts, (counts) => counts.delivered === ids.length, 60)
              expect(totals).toMatchObject({ delivered: 10, retried: 1, heldBack: 6, dead: 0 })
            })
          )
          expect(order).toEqual([0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9])
          const rows = yield* outboxRows(ids)
          // One failed delivery for the failed message; every other message delivered at its first attempt.
          expect(rows.map((row) => row.attempt_count)).toEqual([1, 1, 1, 2, 1, 1, 1, 1, 1, 1])
        })
    )
  })
})
