// Cancelling a message while a projector delivers it: the projector hears it (LISTEN), its
// handler is interrupted where it runs and sees the interruption, nothing is marked, and the
// next message of its ordering key is delivered after it. A cancellation the projector did not
// hear (its LISTEN down, or not up yet) is found when the LISTEN connects, and at the latest
// by the next lease renewal, which the cancelled row refuses.
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import { eventually, freshName, gate, listenDirect, withLayerLive } from "./support.js"

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
            ...(yield* listenDirect),
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

    /**
     * A projector whose LISTEN goes through a gate, shut at first, delivering one message until
     * it is interrupted; `whileDeaf` runs once the handler started (before anything could be
     * heard) with the message's id and the gate's opener. Returns the projector's counts once
     * the delivery was stopped.
     */
    const deafProjector = (
      lease: Duration.Input,
      whileDeaf: (
        slow: string,
        openListener: Effect.Effect<void>
      ) => Effect.Effect<void, unknown, OutboxAdmin.OutboxAdmin>
    ) =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const listener = yield* gate((yield* TestDatabase.TestDatabase).url)
        const topic = freshName("unheard")
        const slow = yield* outbox.enqueue(topic, { n: 1 })
        const started = yield* Deferred.make<void>()
        const interrupted = yield* Deferred.make<void>()
        const publisher = Publisher.layerHandler(() =>
          Effect.andThen(Deferred.succeed(started, undefined), Effect.never).pipe(
            Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))
          )
        )
        return yield* withLayerLive(
          Projector.layer({
            listenUrl: listener.url,
            topics: [topic],
            lease,
            // Never cut by its deadline within the test: only the cancellation stops it.
            deliveryTimeout: "1 hour",
            shutdownDeadline: "1 second",
            pollInterval: "100 millis"
          }).pipe(Layer.provide(publisher)),
          Effect.gen(function*() {
            yield* Deferred.await(started)
            yield* whileDeaf(slow, listener.open)
            yield* Deferred.await(interrupted)
            return yield* eventually((yield* Projector.Projector).counts, (c) => c.cancelled === 1)
          })
        )
      }).pipe(Effect.scoped)

    it.effect("a cancellation sent while its LISTEN was down is found the moment the LISTEN connects", () =>
      Effect.gen(function*() {
        const admin = yield* OutboxAdmin.OutboxAdmin
        // A lease of an hour: no renewal within the test, only the catch-up at connection.
        const counts = yield* deafProjector("1 hour", (slow, openListener) =>
          Effect.gen(function*() {
            expect(yield* admin.cancel([slow])).toEqual({ cancelled: [slow], interrupted: [slow] })
            yield* openListener
          }))
        expect(counts).toMatchObject({ cancelled: 1, delivered: 0, retried: 0, dead: 0 })
      }))

    it.effect("with its LISTEN down for good, the next lease renewal finds the cancellation", () =>
      Effect.gen(function*() {
        const admin = yield* OutboxAdmin.OutboxAdmin
        const counts = yield* deafProjector("3 seconds", (slow) => Effect.asVoid(admin.cancel([slow])))
        expect(counts).toMatchObject({ cancelled: 1, delivered: 0, retried: 0, dead: 0 })
      }))
  })
})
