/**
 * Telemetry a test can read: a tracer that keeps every span it starts and a logger that
 * keeps every line, so a suite can assert what went into spans and logs — that a trace is
 * continued, and that no secret or request data (a canary) ever appears in either.
 *
 * @since 0.1.0
 */
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Exit from "effect/Exit"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as References from "effect/References"
import * as Tracer from "effect/Tracer"

/** An in-memory span: what a tracer exporter would receive. */
export class RecordedSpan implements Tracer.Span {
  readonly _tag = "Span"
  readonly spanId = Math.random().toString(16).slice(2, 18).padEnd(16, "0")
  readonly traceId: string
  readonly attributes = new Map<string, unknown>()
  readonly events: Array<[string, Record<string, unknown> | undefined]> = []
  links: Array<Tracer.SpanLink>
  status: Tracer.SpanStatus
  readonly name: string
  readonly parent: Option.Option<Tracer.AnySpan>
  readonly annotations: Context.Context<never>
  readonly kind: Tracer.SpanKind
  readonly sampled = true
  constructor(options: Parameters<Tracer.Tracer["span"]>[0]) {
    this.name = options.name
    this.parent = options.parent
    this.annotations = options.annotations
    this.kind = options.kind
    this.traceId = Option.match(options.parent, {
      onNone: () => Math.random().toString(16).slice(2).padEnd(32, "0").slice(0, 32),
      onSome: (p) => p.traceId
    })
    this.links = [...options.links]
    this.status = { _tag: "Started", startTime: options.startTime }
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

/** A recorder: run effects `observed` and read what their spans and log lines held. */
export const make = () => {
  const spans: Array<RecordedSpan> = []
  const logs: Array<string> = []
  /** Each log line with its level, message and annotations, in order. */
  const entries: Array<
    { readonly level: string; readonly message: string; readonly annotations: Readonly<Record<string, unknown>> }
  > = []
  const tracer = Tracer.make({
    span: (options) => {
      const span = new RecordedSpan(options)
      spans.push(span)
      return span
    }
  })
  const logger = Logger.make(({ cause, fiber, logLevel, message }) => {
    const annotations = fiber.getRef(References.CurrentLogAnnotations)
    logs.push(JSON.stringify([message, Object.entries(annotations), String(cause)]))
    entries.push({
      level: logLevel,
      message: (Array.isArray(message) ? message : [message]).map(String).join(" "),
      annotations
    })
  })
  const observed = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    effect.pipe(Effect.withTracer(tracer), Effect.provide(Logger.layer([logger])))
  /** Every span name, attribute, event and log line as one text, to search for canaries. */
  const everything = () =>
    JSON.stringify(
      [spans.map((span) => [span.name, [...span.attributes.entries()], span.events]), logs],
      (_, value) => typeof value === "bigint" ? value.toString() : value
    )
  return { spans, logs, entries, observed, everything }
}
