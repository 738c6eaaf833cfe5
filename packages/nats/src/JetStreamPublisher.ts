/**
 * The projector's NATS JetStream publisher: each outbox message is published on a subject
 * derived from its topic, with the outbox message id as `Nats-Msg-Id`, so the stream drops
 * a redelivery inside its duplicate window; delivery waits for the stream's ack. An ack
 * timeout or a lost connection is retryable; a subject no stream accepts is permanent.
 *
 * @since 0.1.0
 */
import { canonicalizeResult } from "@effect-durable/core/Fingerprint"
import * as Traceparent from "@effect-durable/core/Traceparent"
import type { OutboxMessage } from "@effect-durable/pg/OutboxWorker"
import { permanent, Publisher, retryable } from "@effect-durable/projector/Publisher"
import { headers as natsHeaders, NoRespondersError } from "@nats-io/transport-node"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { Nats, reason } from "./Nats.js"

export interface JetStreamPublisherOptions {
  /** Subject of a topic; default: the topic itself. */
  readonly subject?: (topic: string) => string
  /** Longest wait for the stream's ack. Default 5 s. */
  readonly ackTimeout?: Duration.Input
}

// A publishable subject: dot-separated tokens, no wildcards or whitespace.
const SUBJECT = /^[^\s.*>]+(\.[^\s.*>]+)*$/

export const make = (options: JetStreamPublisherOptions = {}) =>
  Effect.map(Nats, ({ jetstream }) => {
    const timeout = Duration.toMillis(Duration.fromInputUnsafe(options.ackTimeout ?? "5 seconds"))
    // On the projector's delivery path: no span or stack frame of its own per message.
    const publish = Effect.fnUntraced(function*(message: OutboxMessage) {
      const subject = options.subject?.(message.topic) ?? message.topic
      if (!SUBJECT.test(subject)) return yield* permanent(`"${subject}" is not a publishable NATS subject`)
      const headers = natsHeaders()
      for (const [key, value] of Object.entries(message.headers)) headers.set(key, value)
      // The delivery's own span, when the projector records one: the consumer's span is its child.
      const trace = yield* Traceparent.current
      if (Option.isSome(trace)) headers.set("traceparent", trace.value)
      headers.set("effect-durable-topic", message.topic)
      if (message.orderingKey !== null) headers.set("effect-durable-ordering-key", message.orderingKey)
      const data = new TextEncoder().encode(Result.getOrThrow(canonicalizeResult(message.payload)))
      yield* Effect.tryPromise({
        try: () => jetstream.publish(subject, data, { msgID: message.id, timeout, headers }),
        // No stream listens on the subject: NATS answers "no responders", which nats.js
        // reports for a JetStream publish as "jetstream is not enabled". Retrying cannot help.
        catch: (error) =>
          error instanceof NoRespondersError || /no responders|503|jetstream is not enabled/i.test(reason(error))
            ? permanent(`no stream accepts subject ${subject} (${reason(error)})`)
            : retryable(`JetStream publish failed: ${reason(error)}`)
      })
    })
    return Publisher.of({ publish })
  })

export const layer = (options: JetStreamPublisherOptions = {}): Layer.Layer<Publisher, never, Nats> =>
  Layer.effect(Publisher, make(options))
