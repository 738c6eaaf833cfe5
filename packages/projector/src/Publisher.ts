/**
 * Where the projector delivers: a `Publisher` takes one outbox message and succeeds once the
 * destination has it, or fails with a `PublishError` that says whether trying again can help.
 * Adapters: `layerHandler` (any Effect) here; transports in packages of their own,
 * `@effect-durable/webhook` (HTTP) and `@effect-durable/nats` (JetStream), on one template
 * (docs/publishers.md).
 *
 * @since 0.1.0
 */
import type { OutboxMessage } from "@effect-durable/pg/OutboxWorker"
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
  new PublishError(
    retryAfterMillis === undefined ? { reason, retryable: true } : { reason, retryable: true, retryAfterMillis }
  )

export const permanent = (reason: string): PublishError => new PublishError({ reason, retryable: false })

export type Publish = (message: OutboxMessage) => Effect.Effect<void, PublishError>

export class Publisher extends Context.Service<Publisher, {
  readonly publish: Publish
  /**
   * Optional, for many publishes in a row (a projector lane): runs `use` with what the
   * publishes need set up once, handing it a `publish` that does not set it up again.
   */
  readonly session?: <A, E>(use: (publish: Publish) => Effect.Effect<A, E>) => Effect.Effect<A, E>
}>()("@effect-durable/projector/Publisher") {}

/** A publisher that runs a handler; its requirements come from the layer's context. */
export const layerHandler = <R>(
  handler: (message: OutboxMessage) => Effect.Effect<void, PublishError, R>
): Layer.Layer<Publisher, never, R> =>
  Layer.effect(
    Publisher,
    Effect.map(Effect.context<R>(), (context) => {
      // The layer's context merged into the caller's, once per caller context (a projector's
      // lanes share one): merging on every message was a tenth of a drain's time.
      const merged = new WeakMap<Context.Context<never>, Context.Context<R>>()
      const provide = <A, E>(effect: Effect.Effect<A, E, R>) =>
        Effect.updateContext(effect, (caller: Context.Context<never>) => {
          let both = merged.get(caller)
          if (both === undefined) merged.set(caller, both = Context.merge(caller, context))
          return both
        })
      return Publisher.of({
        publish: (message) => provide(handler(message)),
        // Inside a session the handler's requirements are met, so it runs as is.
        session: (use) => provide(use(handler as Publish))
      })
    })
  )
