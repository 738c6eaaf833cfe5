import { describe, expect, it } from "@effect/vitest"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Effect from "effect/Effect"
import type * as Context from "effect/Context"
import type * as Exit from "effect/Exit"
import * as Logger from "effect/Logger"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import { eventually, substrate } from "./support.js"

/** An in-memory span: what a tracer exporter would receive. */
class RecordedSpan implements Tracer.Span {
  readonly _tag = "Span"
  readonly spanId = Math.random().toString(16).slice(2, 18).padEnd(16, "0")
  readonly traceId: string
  readonly attributes = new Map<string, unknown>()
  readonly events: Array<[string, Record<string, unknown> | undefined]> = []
  links: Array<Tracer.SpanLink>
  status: Tracer.SpanStatus
  constructor(
    readonly name: string,
    readonly parent: Option.Option<Tracer.AnySpan>,
    readonly context: Context.Context<never>,
    links: ReadonlyArray<Tracer.SpanLink>,
    startTime: bigint,
    readonly kind: Tracer.SpanKind
  ) {
    this.traceId = Option.match(parent, {
      onNone: () => Math.random().toString(16).slice(2).padEnd(32, "0").slice(0, 32),
      onSome: (p) => p.traceId
    })
    this.links = [...links]
    this.status = { _tag: "Started", startTime }
  }
  get sampled() {
    return true
  }
  end(endTime: bigint, exit: Exit.Exit<unknown, unknown>) {
    this.status = { _tag: "Ended", startTime: (this.status as { startTime: bigint }).startTime, endTime, exit }
  }
  attribute(key: string, value: unknown) {
    this.attributes.set(key, value)
  }
  event(name: string, _startTime: bigint, attributes?: Record<string, unknown>) {
    this.events.push([name, attributes])
  }
  addLinks(links: ReadonlyArray<Tracer.SpanLink>) {
    this.links.push(...links)
  }
}

/** A tracer that keeps every span it starts, for inspection. */
const recordingTracer = () => {
  const spans: Array<RecordedSpan> = []
  const tracer = Tracer.make({
    span: (name, parent, context, links, startTime, kind) => {
      const span = new RecordedSpan(name, parent, context, links, startTime, kind)
      spans.push(span)
      return span
    },
    context: (f) => f()
  })
  return { spans, tracer }
}

const CANARY = "canary-7f3e-secret-payload"

describe("Projector observability", () => {
  it.layer(substrate())((it) => {
    it.effect("spans projector.claim and projector.deliver continue the producer's trace; no payload in spans or logs", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const { spans, tracer } = recordingTracer()
        const logged: Array<string> = []
        const logger = Logger.make(({ annotations, message }) => {
          logged.push(JSON.stringify([message, [...annotations]]))
        })
        const observed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
          effect.pipe(
            Effect.withTracer(tracer),
            Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
            Effect.withLogSpan("observed")
          )
        // The producer enqueues inside its own span: that trace id travels in the headers.
        const producerTraceId = yield* observed(Effect.gen(function*() {
          yield* outbox.enqueue("observed", { secret: CANARY, list: [CANARY] })
          return (yield* Effect.currentSpan).traceId
        }).pipe(Effect.withSpan("checkout")))
        // One failing delivery (logged and released), then a good one.
        let attempt = 0
        const publisher = Publisher.layerHandler(() =>
          attempt++ === 0 ? Effect.fail(Publisher.retryable("busy")) : Effect.logInfo("delivered one")
        )
        const drain = Projector.drain({ topics: ["observed"], backoff: { min: "10 millis", max: "10 millis" } }).pipe(
          Effect.provide(publisher)
        )
        yield* observed(drain)
        // Drains that find the retry still delayed claim nothing and deliver nothing.
        yield* eventually(observed(drain), (counts) => counts.delivered === 1)

        const names = spans.map((span) => span.name)
        expect(names).toContain("projector.claim")
        const delivers = spans.filter((span) => span.name === "projector.deliver")
        expect(delivers).toHaveLength(2)
        for (const span of delivers) {
          expect(span.traceId).toBe(producerTraceId)
          expect(Option.map(span.parent, (parent) => parent.traceId)).toEqual(Option.some(producerTraceId))
          expect(span.attributes.get("messaging.destination.name")).toBe("observed")
        }
        const everything = JSON.stringify(
          spans.map((span) => [span.name, [...span.attributes.entries()], span.events]),
          (_, value) => typeof value === "bigint" ? value.toString() : value
        )
        expect(everything).not.toContain(CANARY)
        expect(logged.some((line) => line.includes("delivered one"))).toBe(true)
        expect(logged.join("\n")).not.toContain(CANARY)
      }))

    it.effect("metrics count claimed, delivered, retried and dead messages and record the lag", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = "metered"
        const delivered = Metric.tagged(Projector.metrics.delivered, "topic", topic)
        const dead = Metric.tagged(Projector.metrics.dead, "topic", topic)
        const lag = Metric.tagged(Projector.metrics.lag, "topic", topic)
        const before = { delivered: (yield* Metric.value(delivered)).count, dead: (yield* Metric.value(dead)).count }
        yield* outbox.enqueueMany([{ topic, payload: { ok: true } }, { topic, payload: { ok: true } }, { topic, payload: { ok: false } }])
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
