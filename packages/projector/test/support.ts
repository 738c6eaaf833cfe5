// What projector suites share: a migrated substrate in a fresh database and a recording
// publisher. Row reads and waits come from `@effect-durable/testing`.
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
export { eventually } from "@effect-durable/testing/Eventually"
export { freshName, outboxRows, projectedCount } from "@effect-durable/testing/TestSubstrate"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import type { PublishError } from "../src/Publisher.js"
import * as Publisher from "../src/Publisher.js"

export const substrate = (options: TestDatabase.Options = {}) =>
  TestSubstrate.layer({ database: { maxConnections: 16, applicationName: "projector-test", ...options } })

/**
 * The projector option that keeps its LISTEN on the server: a direct `listenUrl` when the
 * suite's pools go through a transaction pooler (which cannot carry a LISTEN), nothing
 * otherwise (the listener then uses the pool's own configuration, the default path).
 */
export const listenDirect = Effect.map(
  TestDatabase.TestDatabase,
  (database): { readonly listenUrl?: Redacted.Redacted<string> } =>
    TestDatabase.isPooled(database) ? { listenUrl: database.url } : {}
)

/** Every delivery a publisher saw, in the order it saw them. */
export class Deliveries {
  readonly seen: Array<OutboxWorker.OutboxMessage> = []
  ids(): Array<string> {
    return this.seen.map((message) => message.id)
  }
}

/** A publisher that records each message, then runs `behaviour` (default: succeed). */
export const recording = (
  deliveries: Deliveries,
  behaviour: (message: OutboxWorker.OutboxMessage) => Effect.Effect<void, PublishError> = () => Effect.void
) =>
  Publisher.layerHandler((message) =>
    Effect.andThen(Effect.sync(() => deliveries.seen.push(message)), behaviour(message))
  )
