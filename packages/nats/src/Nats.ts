/**
 * A NATS connection with JetStream, as a scoped resource: connected when the layer is
 * built, drained and closed when its scope closes.
 *
 * @since 0.1.0
 */
import { jetstream, type JetStreamClient, type JetStreamManager, jetstreamManager } from "@nats-io/jetstream"
import { connect, type NatsConnection } from "@nats-io/transport-node"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

export class NatsError extends Schema.TaggedError<NatsError>("@effect-durable/NatsError")("NatsError", {
  operation: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `NATS ${this.operation}: ${this.reason}`
  }
}

export class Nats extends Context.Service<Nats, {
  readonly connection: NatsConnection
  readonly jetstream: JetStreamClient
  readonly manager: JetStreamManager
}>()("@effect-durable/nats/Nats") {}

export const reason = (error: unknown): string => error instanceof Error ? error.message : String(error)

export const layer = (options: { readonly servers: string | ReadonlyArray<string>; readonly name?: string }) =>
  Layer.effect(
    Nats,
    Effect.gen(function*() {
      const connection = yield* Effect.acquireRelease(
        Effect.tryPromise({
          try: () =>
            connect({
              servers: typeof options.servers === "string" ? options.servers : [...options.servers],
              name: options.name ?? "effect-durable"
            }),
          catch: (error) => new NatsError({ operation: "connect", reason: reason(error) })
        }),
        (connection) => Effect.promise(() => connection.drain().catch(() => connection.close()))
      )
      const manager = yield* Effect.tryPromise({
        try: () => jetstreamManager(connection),
        catch: (error) => new NatsError({ operation: "jetstream", reason: reason(error) })
      })
      return Nats.of({ connection, jetstream: jetstream(connection), manager })
    })
  )
