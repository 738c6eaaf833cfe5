// A projector over a live topic set (`topics` as a function, asked at every claim): the workflow
// engine's one projector for every workflow a process registers.
import * as Outbox from "@effect-durable/pg/Outbox"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/testing/TestClock"
import * as Projector from "../src/Projector.js"
import { Deliveries, eventually, freshName, listenDirect, recording, substrate, withLayerLive } from "./support.js"

describe("Projector: a live topic set", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("claims only what the set holds at each claim: nothing while it is empty, a topic once it is added", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const [a, b] = [freshName("live-a"), freshName("live-b")]
        const ids = yield* outbox.enqueueMany([
          { topic: a, payload: { n: 1 } },
          { topic: b, payload: { n: 2 } },
          { topic: a, payload: { n: 3 } }
        ])
        const live: Array<string> = []
        const deliveries = new Deliveries()
        const drain = Projector.drain({ topics: () => live }).pipe(
          Effect.provide(recording(deliveries)),
          TestClock.withLive
        )
        expect(yield* drain).toMatchObject({ claimed: 0 })
        live.push(a)
        expect(yield* drain).toMatchObject({ claimed: 2, delivered: 2 })
        expect(deliveries.ids()).toEqual([ids[0], ids[2]])
        live.push(b)
        expect(yield* drain).toMatchObject({ claimed: 1, delivered: 1 })
        expect(deliveries.ids()).toEqual([ids[0], ids[2], ids[1]])
        // A topic the outbox refuses fails the claim with the outbox's typed error.
        live.push("")
        const refused = yield* Effect.flip(drain)
        expect(refused._tag === "InvalidInput" && refused.argument.startsWith("topics")).toBe(true)
      }))

    it.effect("a running projector delivers a topic added after it started, woken by its NOTIFY", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const [first, later] = [freshName("live-first"), freshName("live-later")]
        const live = [first]
        const deliveries = new Deliveries()
        const listen = yield* listenDirect
        yield* withLayerLive(
          Projector.layer({ topics: () => live, pollInterval: "1 hour", ...listen }).pipe(
            Layer.provide(recording(deliveries))
          ),
          Effect.gen(function*() {
            const [one] = yield* outbox.enqueueMany([{ topic: first, payload: {} }])
            yield* eventually(Effect.sync(() => deliveries.ids()), (ids) => ids.includes(one!))
            live.push(later)
            const [two] = yield* outbox.enqueueMany([{ topic: later, payload: {} }])
            yield* eventually(Effect.sync(() => deliveries.ids()), (ids) => ids.includes(two!))
          })
        )
      }))
  })
})
