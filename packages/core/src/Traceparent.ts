/**
 * The W3C `traceparent` header (https://www.w3.org/TR/trace-context/): how a trace crosses the
 * outbox (stored with each message), a publisher (HTTP, NATS headers) and a consumer's inbox.
 * One place reads and writes it: the producer's enqueue, the projector's delivery span, the
 * JetStream publisher and the JetStream inbox.
 *
 * @since 0.2.0
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/** A span as a `traceparent` value (version 00). */
export const format = (span: { readonly traceId: string; readonly spanId: string; readonly sampled: boolean }) =>
  `00-${span.traceId}-${span.spanId}-${span.sampled ? "01" : "00"}`

/** The current span as a `traceparent`, when there is one. */
export const current: Effect.Effect<Option.Option<string>> = Effect.map(Effect.currentSpan, format).pipe(Effect.option)

/** The span a `traceparent` header names, as a parent for a span of ours; none when absent or malformed. */
export const parentOf = (headers: Readonly<Record<string, string>>): Tracer.ExternalSpan | undefined => {
  const match = TRACEPARENT.exec(headers.traceparent ?? "")
  return match === null
    ? undefined
    : Tracer.externalSpan({ traceId: match[1]!, spanId: match[2]!, sampled: (parseInt(match[3]!, 16) & 1) === 1 })
}

/** Whether spans are recorded by anyone (a tracer other than Effect's built-in one, which exports nothing). */
export const tracing: Effect.Effect<boolean> = Effect.map(Effect.tracer, (tracer) => tracer !== Tracer.nativeTracer)
