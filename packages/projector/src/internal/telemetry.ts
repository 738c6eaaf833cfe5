/**
 * What the projector reports: Effect metrics with a `topic` attribute, and a span per delivery
 * that continues the producer's trace (from the W3C `traceparent` stored with the message) —
 * made only when a real tracer is installed. Payloads never go into spans, metrics or logs.
 */
import * as Traceparent from "@effect-durable/core/Traceparent"
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"

/** Effect metrics of the projector, with a `topic` attribute where a message is concerned. */
export const metrics = {
  claimed: Metric.counter("effect_durable_projector_claimed_total", { description: "messages claimed" }),
  delivered: Metric.counter("effect_durable_projector_delivered_total", {
    description: "messages delivered and marked"
  }),
  retried: Metric.counter("effect_durable_projector_retried_total", { description: "deliveries released for a retry" }),
  dead: Metric.counter("effect_durable_projector_dead_total", { description: "messages sent to the dead letters" }),
  stale: Metric.counter("effect_durable_projector_stale_total", { description: "deliveries whose claim went stale" }),
  heldBack: Metric.counter("effect_durable_projector_held_back_total", {
    description: "messages of a keyed run given back unstarted behind one of their key that did not succeed"
  }),
  cancelled: Metric.counter("effect_durable_projector_cancelled_total", {
    description: "messages cancelled while this projector held them (their delivery stopped, never marked)"
  }),
  leasesLost: Metric.counter("effect_durable_projector_leases_lost_total", {
    description: "claims a lease renewal found taken over (the lease ran out first)"
  }),
  renewalFailures: Metric.counter("effect_durable_projector_renewal_failures_total", {
    description: "lease renewals that failed: their batch's messages not yet started were given back"
  }),
  storeErrors: Metric.counter("effect_durable_projector_store_errors_total", {
    description: "claims or settlements that failed in the database (each is retried)"
  }),
  batchSize: Metric.histogram("effect_durable_projector_batch_size", {
    boundaries: Metric.boundariesFromIterable([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]),
    description: "messages per claim"
  }),
  lag: Metric.histogram("effect_durable_projector_lag_seconds", {
    boundaries: Metric.exponentialBoundaries({ start: 0.001, factor: 2, count: 20 }),
    description: "enqueue to delivery, seconds"
  })
}

/**
 * Every counter of the projector, at zero until it counts: a scrape shows each series from the
 * start (an increase from nothing is not a rate), and a dashboard finds every name.
 */
export const registerCounters: Effect.Effect<void> = Effect.forEach(
  Object.values(metrics).flatMap((metric) => metric.type === "Counter" ? [metric as Metric.Counter<number>] : []),
  (counter) => Metric.update(counter, 0),
  { discard: true }
)

// An attribute makes a new metric (and key); the projector sets one per topic, so it keeps them.
const byMetric = new WeakMap<object, Map<string, Metric.Metric<any, any>>>()

/** The metric with a `topic` attribute, made once per metric and topic. */
export const forTopic = <M extends Metric.Metric<any, any>>(metric: M, topic: string): M => {
  let byTopic = byMetric.get(metric)
  if (byTopic === undefined) byMetric.set(metric, byTopic = new Map())
  let found = byTopic.get(topic)
  if (found === undefined) byTopic.set(topic, found = Metric.withAttributes(metric, { topic }))
  return found as M
}

/** Whether spans would be recorded by anyone (a tracer other than Effect's built-in one, which exports nothing). */
export const tracing = Traceparent.tracing

/** The span a producer was in when it enqueued, from the stored W3C `traceparent`. */
const producerSpan = Traceparent.parentOf

/** A delivery in a `projector.deliver` span, a child of the producer's span. */
export const deliverySpan = <A, E, R>(message: OutboxWorker.OutboxMessage, publish: Effect.Effect<A, E, R>) => {
  const parent = producerSpan(message.headers)
  return Effect.withSpan(publish, "projector.deliver", {
    captureStackTrace: false,
    kind: "producer",
    attributes: {
      "messaging.message.id": message.id,
      "messaging.destination.name": message.topic,
      "effect_durable.attempt": message.attempt
    },
    ...(parent === undefined ? {} : { parent })
  })
}

/** The most producer spans a batch's span links to. */
const BATCH_LINKS = 128

/**
 * A batch delivery in a `projector.deliverBatch` span, linked to its messages' producer spans
 * (a batch has many parents; OpenTelemetry's answer is links).
 */
export const batchSpan = <A, E, R>(
  messages: ReadonlyArray<OutboxWorker.OutboxMessage>,
  publish: Effect.Effect<A, E, R>
) => {
  const links = messages.slice(0, BATCH_LINKS).flatMap((message) => {
    const span = producerSpan(message.headers)
    return span === undefined ? [] : [{ span, attributes: { "messaging.message.id": message.id } }]
  })
  return Effect.withSpan(publish, "projector.deliverBatch", {
    captureStackTrace: false,
    kind: "producer",
    attributes: {
      "messaging.batch.message_count": messages.length,
      "messaging.destination.name": messages[0]?.topic ?? ""
    },
    links
  })
}
