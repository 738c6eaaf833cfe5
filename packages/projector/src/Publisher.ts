/**
 * Where the projector delivers: a `Publisher` takes one outbox message and succeeds once the
 * destination has it, or fails with a `PublishError` that says whether trying again can help.
 * Adapters: `layerHandler` (any Effect), `Webhook` (HTTP), `@effect-durable/nats` (JetStream).
 *
 * @since 0.1.0
 */
import type { OutboxMessage } from "@effect-durable/pg/Outbox"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

/** A delivery that did not happen. `retryable: false` sends the message to the dead letters. */
export class PublishError extends Schema.TaggedError<PublishError>("@effect-durable/PublishError")("PublishError", {
  reason: Schema.String,
  retryable: Schema.Boolean,
  /** The destination asked to wait at least this long (e.g. HTTP `Retry-After`). */
  retryAfterMillis: Schema.optional(Schema.Number)
}) {
  override get message() {
    return `${this.retryable ? "retryable" : "permanent"} delivery failure: ${this.reason}`
  }
}

export const retryable = (reason: string, retryAfterMillis?: number): PublishError =>
  new PublishError(retryAfterMillis === undefined ? { reason, retryable: true } : { reason, retryable: true, retryAfterMillis })

export const permanent = (reason: string): PublishError => new PublishError({ reason, retryable: false })

export class Publisher extends Context.Tag("@effect-durable/projector/Publisher")<Publisher, {
  readonly publish: (message: OutboxMessage) => Effect.Effect<void, PublishError>
}>() {}

/** A publisher that runs a handler; its requirements come from the layer's context. */
export const layerHandler = <R>(
  handler: (message: OutboxMessage) => Effect.Effect<void, PublishError, R>
): Layer.Layer<Publisher, never, R> =>
  Layer.effect(
    Publisher,
    Effect.map(Effect.context<R>(), (context) =>
      Publisher.of({ publish: (message) => Effect.provide(handler(message), context) }))
  )
