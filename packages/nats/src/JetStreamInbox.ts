/**
 * A durable JetStream pull consumer that applies each delivery through the inbox: the
 * handler's effect and the receipt commit in one PostgreSQL transaction, and the message is
 * acked only after that commit. A redelivery (after a crash between commit and ack, or an
 * ack lost on the way) finds the receipt and is acked without running anything; a failed
 * handler leaves no receipt and the message is nak'ed for a later redelivery.
 *
 * @since 0.1.0
 */
import type { InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import { printable } from "@effect-durable/core/Printable"
import * as Traceparent from "@effect-durable/core/Traceparent"
import * as Inbox from "@effect-durable/pg/Inbox"
import { AckPolicy, type JsMsg } from "@nats-io/jetstream"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { Nats, NatsError, reason } from "./Nats.js"

export interface Delivery {
  /** `Nats-Msg-Id` (the outbox message id), or the stream sequence when absent. */
  readonly id: string
  readonly subject: string
  readonly payload: unknown
  readonly headers: Readonly<Record<string, string>>
  /** 1 for the first delivery of this message by the broker. */
  readonly deliveryCount: number
}

export interface ConsumeOptions<E, R> {
  readonly stream: string
  /** The durable consumer's name; also the inbox consumer name. */
  readonly durable: string
  /** Subject filter of the consumer; default: the whole stream. */
  readonly filterSubject?: string
  readonly handle: (delivery: Delivery) => Effect.Effect<void, E, R>
  /** Redelivery delay after a failed handler. Default 1 s. */
  readonly retryDelay?: Duration.Input
  /** Messages fetched per pull (1 to 10,000). Default 100. */
  readonly batch?: number
  /**
   * Deliveries applied at once (1 to 256), each in its own inbox transaction. Default 1: one
   * at a time, in the order the consumer hands them over. More is faster (each application
   * waits on PostgreSQL) but keeps no order between messages. Keep it at most the pool's
   * connections left to this consumer: a delivery waiting for a connection still counts
   * against the consumer's ack wait (30 s by default), after which the broker redelivers it.
   */
  readonly concurrency?: number
}

const decodeConcurrency = Input.argument("concurrency", Input.Count(256))
const decodeBatch = Input.argument("batch", Input.Count(10_000))

const toDelivery = (message: JsMsg): Delivery => {
  const headers: Record<string, string> = {}
  for (const key of message.headers?.keys() ?? []) headers[key] = message.headers!.get(key)
  const text = new TextDecoder().decode(message.data)
  let payload: unknown
  try {
    payload = JSON.parse(text)
  } catch {
    payload = text
  }
  return {
    id: headers["Nats-Msg-Id"] ?? `seq-${message.seq}`,
    subject: message.subject,
    payload,
    headers,
    deliveryCount: message.info.deliveryCount
  }
}

/**
 * Creates (or updates) the durable consumer and consumes until the scope closes. Each
 * message: `Inbox.handle(durable, id, handle(delivery))`, then ack; a failure naks.
 */
export const consume = <E, R>(
  options: ConsumeOptions<E, R>
): Effect.Effect<void, NatsError | InvalidInput, Nats | Inbox.Inbox | Scope.Scope | R> =>
  Effect.gen(function*() {
    const concurrency = options.concurrency === undefined ? 1 : yield* decodeConcurrency(options.concurrency)
    const batch = options.batch === undefined ? 100 : yield* decodeBatch(options.batch)
    const { jetstream, manager } = yield* Nats
    const inbox = yield* Inbox.Inbox
    const retryDelay = Duration.toMillis(Duration.fromInputUnsafe(options.retryDelay ?? "1 second"))
    yield* Effect.tryPromise({
      try: () =>
        manager.consumers.add(options.stream, {
          durable_name: options.durable,
          ack_policy: AckPolicy.Explicit,
          ...(options.filterSubject === undefined ? {} : { filter_subject: options.filterSubject })
        }),
      catch: (error) => new NatsError({ operation: "create consumer", reason: reason(error) })
    })
    const consumer = yield* Effect.tryPromise({
      try: () => jetstream.consumers.get(options.stream, options.durable),
      catch: (error) => new NatsError({ operation: "get consumer", reason: reason(error) })
    })
    // Per message, on the hot path: no stack frame of its own, and a span only when a tracer
    // records it (a child of the publisher's delivery span, from the W3C `traceparent` header).
    const spans = yield* Traceparent.tracing
    const inSpan = <A, E2, R2>(delivery: Delivery, effect: Effect.Effect<A, E2, R2>) => {
      if (!spans) return effect
      const parent = Traceparent.parentOf(delivery.headers)
      return Effect.withSpan(effect, "JetStreamInbox.apply", {
        captureStackTrace: false,
        kind: "consumer",
        attributes: {
          "messaging.message.id": delivery.id,
          "messaging.destination.name": delivery.subject,
          "messaging.consumer.group.name": options.durable
        },
        ...(parent === undefined ? {} : { parent })
      })
    }
    const apply = Effect.fnUntraced(function*(message: JsMsg) {
      const delivery = toDelivery(message)
      yield* inSpan(delivery, inbox.handle(options.durable, delivery.id, options.handle(delivery))).pipe(
        // Ack only after the inbox transaction committed (Processed) or found the receipt (Duplicate).
        Effect.andThen(Effect.sync(() => message.ack())),
        // A failure or a defect of the handler: logged and nak'ed for a later redelivery; the
        // consumer goes on (a defect used to end it, silently).
        Effect.catchCause((cause) =>
          Cause.hasInterruptsOnly(cause) ? Effect.failCause(cause) : Effect.andThen(
            Effect.logWarning(
              `effect-durable inbox ${printable(options.durable)}: ${printable(delivery.id)} failed, redelivering: ${
                printable(String(Cause.squash(cause)))
              }`
            ),
            Effect.sync(() => message.nak(retryDelay))
          )
        ),
        // Stopped mid-delivery (the scope closed): its transaction rolled back, or committed
        // before the ack; nak'ed, it comes back at once rather than after the ack wait, and the
        // inbox absorbs it if it had committed.
        Effect.onInterrupt(() => Effect.sync(() => message.nak()))
      )
    })
    const messages = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () => consumer.consume({ max_messages: batch }),
        catch: (error) => new NatsError({ operation: "consume", reason: reason(error) })
      }),
      (messages) => Effect.promise(() => messages.close().then(() => undefined, () => undefined))
    )
    // `concurrency` at a time (default one, in the order the consumer hands them over), until the scope closes.
    yield* Stream.fromAsyncIterable(messages, (error) => new NatsError({ operation: "consume", reason: reason(error) }))
      .pipe(
        Stream.mapEffect(apply, { concurrency, unordered: true }),
        Stream.runDrain,
        Effect.forkScoped
      )
  })
