/**
 * Where the projector delivers: a `Publisher` takes one outbox message and succeeds once the
 * destination has it, or fails with a `PublishError` that says whether trying again can help.
 * A publisher may also take a batch (`layerBatchHandler`): up to `maxSize` messages of one
 * topic in one call, each with an outcome of its own.
 * Adapters: `layerHandler` and `layerBatchHandler` (any Effect) here; transports in packages of their own,
 * `@effect-durable/webhook` (HTTP) and `@effect-durable/nats` (JetStream), on one template
 * (docs/publishers.md).
 *
 * @since 0.1.0
 */
import type { DurableConfigError } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Options from "@effect-durable/core/Options"
import type { OutboxMessage } from "@effect-durable/pg/OutboxWorker"
import type * as Arr from "effect/Array"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
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

/**
 * What a batch handler reports when part of its batch failed: the failed messages with their
 * errors; every other message of the batch was delivered. Built with `failedIn`.
 */
export class BatchOutcome {
  constructor(
    /** The failures, by message id. */
    readonly failures: ReadonlyMap<string, PublishError>
  ) {}
}

/** A batch that succeeded in part: these messages failed (each with its error), the rest were delivered. */
export const failedIn = (failures: Iterable<readonly [OutboxMessage, PublishError]>): BatchOutcome =>
  new BatchOutcome(new Map(Array.from(failures, ([message, error]) => [message.id, error] as const)))

/**
 * Delivers up to `maxSize` messages of one topic, each key's messages together in id order. Succeeding delivers them all; failing fails them all with the error;
 * returning a `BatchOutcome` fails the messages it names and delivers the rest.
 */
export type PublishBatch = (
  messages: Arr.NonEmptyReadonlyArray<OutboxMessage>
) => Effect.Effect<void | BatchOutcome, PublishError>

/** A publisher's batches: how many messages a call takes, how long a short batch waits to fill, the call. */
export interface Batching {
  readonly maxSize: number
  readonly maxWait: Duration.Duration
  readonly publish: PublishBatch
}

export class Publisher extends Context.Service<Publisher, {
  readonly publish: Publish
  /** When present, the projector hands this publisher batches of one topic instead of single messages. */
  readonly batch?: Batching
  /**
   * Optional, for many publishes in a row (a projector lane): runs `use` with what the
   * publishes need set up once, handing it a `publish` that does not set it up again.
   */
  readonly session?: <A, E>(use: (publish: Publish) => Effect.Effect<A, E>) => Effect.Effect<A, E>
}>()("@effect-durable/projector/Publisher") {}

/**
 * Runs `effect` with `context` merged into the caller's, merged once per caller context (a
 * projector's lanes share one): merging on every message was a tenth of a drain's time.
 */
const providing = <R>(context: Context.Context<R>) => {
  const merged = new WeakMap<Context.Context<never>, Context.Context<R>>()
  return <A, E>(effect: Effect.Effect<A, E, R>) =>
    Effect.updateContext(effect, (caller: Context.Context<never>) => {
      let both = merged.get(caller)
      if (both === undefined) merged.set(caller, both = Context.merge(caller, context))
      return both
    })
}

/** A publisher that runs a handler; its requirements come from the layer's context. */
export const layerHandler = <R>(
  handler: (message: OutboxMessage) => Effect.Effect<void, PublishError, R>
): Layer.Layer<Publisher, never, R> =>
  Layer.effect(
    Publisher,
    Effect.map(Effect.context<R>(), (context) => {
      const provide = providing(context)
      return Publisher.of({
        publish: (message) => provide(handler(message)),
        // Inside a session the handler's requirements are met, so it runs as is.
        session: (use) => provide(use(handler as Publish))
      })
    })
  )

/** The options of `layerBatchHandler`. */
export interface BatchOptions {
  /** The most messages per call (1-1000). A batch never holds more than the projector claims at once. */
  readonly maxSize: number
  /**
   * How long a claim waits, once the backlog is drained, for more messages to fill a batch
   * (0-1 hour). Default 0: a batch goes with whatever is ready. Under a backlog batches are
   * full and nothing waits.
   */
  readonly maxWait?: Duration.Input
}

const BatchOptionsTable = Options.declare({
  maxSize: Options.option({
    schema: Input.Count(1000),
    purpose: "the most messages per call (1-1000)",
    example: "100"
  }),
  maxWait: Options.option({
    schema: Input.DurationIn({ min: 0, max: "1 hour" }),
    default: "0 millis",
    purpose: "how long a short batch waits to fill once the backlog is drained (0-1 hour)",
    example: "200 millis"
  })
})

/**
 * A publisher that runs a handler on batches: up to `maxSize` messages of one topic per call
 * (a key's messages together, in order). Per-message outcomes: the handler fails the whole
 * batch, or names the messages that failed (`failedIn`). A message of a key after one of its
 * key that failed is not marked, whatever the handler did with it: it is delivered again after
 * the one that failed, so a key's outcomes keep their order. A bad option is a
 * `DurableConfigError` naming it.
 */
export const layerBatchHandler = <R>(
  options: BatchOptions,
  handler: (messages: Arr.NonEmptyReadonlyArray<OutboxMessage>) => Effect.Effect<void | BatchOutcome, PublishError, R>
): Layer.Layer<Publisher, DurableConfigError, R> =>
  Layer.effect(
    Publisher,
    Effect.gen(function*() {
      const { maxSize, maxWait } = yield* BatchOptionsTable.decode(options)
      const provide = providing(yield* Effect.context<R>())
      const publishBatch: PublishBatch = (messages) => provide(handler(messages))
      return Publisher.of({
        publish: (message) =>
          Effect.flatMap(publishBatch([message]), (outcome) => {
            const failure = outcome instanceof BatchOutcome ? outcome.failures.get(message.id) : undefined
            return failure === undefined ? Effect.void : Effect.fail(failure)
          }),
        batch: { maxSize, maxWait, publish: publishBatch }
      })
    })
  )
