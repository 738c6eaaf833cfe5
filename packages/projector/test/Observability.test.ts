import * as Outbox from "@effect-durable/pg/Outbox"
import * as Telemetry from "@effect-durable/testing/Telemetry"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import { eventually, projectedCount, substrate } from "./support.js"

const CANARY = "canary-7f3e-secret-payload"

describe("Projector observability", () => {
  it.layer(substrate())((it) => {
    it.effect("spans projector.claim and projector.deliver continue the producer's trace; no payload in spans or logs", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const { everything, logs: logged, observed, spans } = Telemetry.make()
        // The producer enqueues inside its own span: that trace id travels in the headers.
        const [id, producerTraceId] = yield* observed(
          Effect.gen(function*() {
            const id = yield* outbox.enqueue("observed", { secret: CANARY, list: [CANARY] })
            return [id, (yield* Effect.currentSpan).traceId] as const
          }).pipe(Effect.withSpan("checkout"))
        )
        // One failing delivery (logged and released), then a good one.
        let attempt = 0
        const publisher = Publisher.layerHandler(() =>
          attempt++ === 0 ? Effect.fail(Publisher.retryable("busy")) : Effect.logInfo("delivered one")
        )
        const drain = Projector.drain({ topics: ["observed"], backoff: { min: "10 millis", max: "10 millis" } }).pipe(
          Effect.provide(publisher)
        )
        // The first drain fails once and may deliver the retry itself, if its delay has passed
        // by its next claim; later drains deliver it otherwise. Either way: until it is projected.
        yield* eventually(Effect.andThen(observed(drain), projectedCount([id])), (n) => n === 1)

        const names = spans.map((span) => span.name)
        expect(names).toContain("projector.claim")
        const delivers = spans.filter((span) => span.name === "projector.deliver")
        expect(delivers).toHaveLength(2)
        for (const span of delivers) {
          expect(span.traceId).toBe(producerTraceId)
          expect(Option.map(span.parent, (parent) => parent.traceId)).toEqual(Option.some(producerTraceId))
          expect(span.attributes.get("messaging.destination.name")).toBe("observed")
        }
        expect(logged.some((line) => line.includes("delivered one"))).toBe(true)
        expect(everything()).not.toContain(CANARY)
      }))

    it.effect("metrics count claimed, delivered, retried and dead messages and record the lag", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = "metered"
        const delivered = Metric.withAttributes(Projector.metrics.delivered, { ["topic"]: topic })
        const dead = Metric.withAttributes(Projector.metrics.dead, { ["topic"]: topic })
        const lag = Metric.withAttributes(Projector.metrics.lag, { ["topic"]: topic })
        const before = { delivered: (yield* Metric.value(delivered)).count, dead: (yield* Metric.value(dead)).count }
        yield* outbox.enqueueMany([{ topic, payload: { ok: true } }, { topic, payload: { ok: true } }, {
          topic,
          payload: { ok: false }
        }])
        const publisher = Publisher.layerHandler((message) =>
          (message.payload as { ok: boolean }).ok ? Effect.void : Effect.fail(Publisher.permanent("refused"))
        )
        yield* Projector.drain({ topics: [topic] }).pipe(Effect.provide(publisher))
        expect((yield* Metric.value(delivered)).count - before.delivered).toBe(2)
        expect((yield* Metric.value(dead)).count - before.dead).toBe(1)
        expect((yield* Metric.value(lag)).count).toBeGreaterThanOrEqual(3)
      }))
  })
})
