// A topic's global concurrency limit across three projectors: the handlers never run more
// than the limit at once (counted in the handlers and, at every claim, by the checker inside
// the database), and run exactly the limit at once when there is work (a barrier the first
// deliveries wait at until that many are running together).
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as FlowChecker from "@effect-durable/testing/FlowChecker"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import { eventually, freshName, listenDirect, substrate, withLayerLive } from "./support.js"

const LIMIT = 4

describe("Projector: a topic's global concurrency limit", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("three projectors with 8 lanes each deliver at most the limit at once, and the limit at once while there is work", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const flow = yield* FlowControl.FlowControl
        yield* FlowChecker.install()
        const topic = freshName("limited")
        yield* flow.setLimit(topic, { maxInFlight: LIMIT })
        const ids = yield* outbox.enqueueMany(
          Array.from({ length: 60 }, (_, i) => ({ topic, payload: { i }, options: { group: `tenant${i % 3}` } }))
        )
        let running = 0
        let most = 0
        const delivered = new Set<string>()
        const full = yield* Deferred.make<void>()
        const publisher = Publisher.layerHandler((message) =>
          Effect.gen(function*() {
            running++
            most = Math.max(most, running)
            if (running === LIMIT) yield* Deferred.succeed(full, undefined)
            // The first deliveries wait until the limit is reached: it must be reachable.
            if (delivered.size < LIMIT) yield* Deferred.await(full)
            yield* Effect.yieldNow
            delivered.add(message.id)
          }).pipe(Effect.ensuring(Effect.sync(() => void running--)))
        )
        const listen = yield* listenDirect
        const projector = (n: number) =>
          Projector.layer({
            ...listen,
            workerId: `limited-${n}`,
            topics: [topic],
            concurrency: 8,
            batchSize: 10,
            pollInterval: "50 millis"
          })
        yield* withLayerLive(
          Layer.mergeAll(projector(1), projector(2), projector(3)).pipe(Layer.provide(publisher)),
          eventually(Effect.sync(() => delivered.size), (n) => n === ids.length)
        )
        expect(most).toBe(LIMIT)
        expect([...delivered].sort()).toEqual([...ids].sort())
        expect((yield* FlowChecker.overshoots()).filter((o) => o.topic === topic)).toEqual([])
      }))
  })
})

describe("Projector: a topic's rate limit", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("with an hour-long poll interval the projector still drains a rate-limited backlog: it sleeps until the bucket's next token, and never past the bucket", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const flow = yield* FlowControl.FlowControl
        yield* FlowChecker.install()
        const topic = freshName("rated")
        yield* flow.setLimit(topic, { rate: { limit: 20, per: "1 second", burst: 2 } })
        const ids = yield* outbox.enqueueMany(Array.from({ length: 16 }, (_, i) => ({ topic, payload: { i } })))
        const delivered = new Set<string>()
        const publisher = Publisher.layerHandler((message) => Effect.sync(() => void delivered.add(message.id)))
        const listen = yield* listenDirect
        yield* withLayerLive(
          Projector.layer({ ...listen, topics: [topic], pollInterval: "1 hour" }).pipe(Layer.provide(publisher)),
          eventually(Effect.sync(() => delivered.size), (n) => n === ids.length)
        )
        expect([...delivered].sort()).toEqual([...ids].sort())
        expect((yield* FlowChecker.rateOvershoots()).filter((o) => o.topic === topic)).toEqual([])
      }))
  })
})
