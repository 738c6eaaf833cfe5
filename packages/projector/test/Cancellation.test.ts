// Cancelling a message while a projector delivers it: the projector hears it (LISTEN), its
// handler is interrupted where it runs and sees the interruption, nothing is marked, and the
// next message of its ordering key is delivered after it.
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import { eventually, freshName, withLayerLive } from "./support.js"

const Live = TestSubstrate.layer({ database: { maxConnections: 12, applicationName: "cancel-test" } })

describe("Projector: a message cancelled while it is delivered", () => {
  it.layer(Live, { timeout: "2 minutes" })((it) => {
    it.effect("its handler is interrupted where it runs and sees it; it is never marked; the next of its key follows", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const admin = yield* OutboxAdmin.OutboxAdmin
        const search = yield* OutboxSearch.OutboxSearch
        const topic = freshName("cancel")
        const [slow, next] = yield* outbox.enqueueMany([
          { topic, payload: { n: 1 }, options: { orderingKey: "k" } },
          { topic, payload: { n: 2 }, options: { orderingKey: "k" } }
        ])
        const started = yield* Deferred.make<void>()
        const interrupted = yield* Deferred.make<void>()
        const delivered: Array<string> = []
        const publisher = Publisher.layerHandler((message) =>
          message.id === slow
            ? Effect.andThen(Deferred.succeed(started, undefined), Effect.never).pipe(
              Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))
            )
            : Effect.sync(() => void delivered.push(message.id))
        )
        const counts = yield* withLayerLive(
          Projector.layer({
            topics: [topic],
            lease: "30 seconds",
            shutdownDeadline: "1 second",
            pollInterval: "100 millis"
          }).pipe(
            Layer.provide(publisher)
          ),
          Effect.gen(function*() {
            yield* Deferred.await(started)
            expect(yield* admin.cancel([slow!], { reason: "order withdrawn" })).toEqual({
              cancelled: [slow],
              interrupted: [slow]
            })
            // Well before the 30 s lease: the cancellation, not a lease, stops it.
            yield* Deferred.await(interrupted)
            yield* eventually(Effect.sync(() => delivered), (ids) => ids.length === 1)
            return yield* eventually((yield* Projector.Projector).counts, (c) => c.cancelled === 1 && c.delivered === 1)
          })
        )
        expect(counts).toMatchObject({ cancelled: 1, delivered: 1, retried: 0, dead: 0 })
        expect(delivered).toEqual([next])
        const found = yield* search.message(slow!)
        expect(found._tag === "Some" && [found.value.state, found.value.projectedAt]).toEqual(["cancelled", null])
      }))
  })
})
