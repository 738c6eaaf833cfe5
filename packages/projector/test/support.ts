// What projector suites share: a migrated substrate in a fresh database and a recording
// publisher. Row reads and waits come from `@effect-durable/testing`.
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
export { eventually } from "@effect-durable/testing/Eventually"
export { freshName, outboxRows, projectedCount } from "@effect-durable/testing/TestSubstrate"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import * as TestClock from "effect/testing/TestClock"
import * as net from "node:net"
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

/**
 * Runs `body` with the services of `layer`, built on the live clock: what the layer forks (a
 * projector's loops, keeper and listener, their polls and backoffs) and its finalizers (the
 * shutdown deadline) run in real time — the TestClock of `it.effect` would never let them
 * pass. `body` keeps the caller's clock (`eventually` waits on the live clock by itself; a
 * `TestClock.withLive` inside another one fails).
 */
export const withLayerLive = <ROut, E, RIn, A, E2, R>(
  layer: Layer.Layer<ROut, E, RIn>,
  body: Effect.Effect<A, E2, R>
): Effect.Effect<A, E | E2, Exclude<RIn | Exclude<R, ROut>, Scope.Scope>> =>
  Effect.scoped(Effect.flatMap(TestClock.withLive(Layer.build(layer)), (context) => Effect.provide(body, context)))

/**
 * A gate in front of the database for one connection path (a projector's `listenUrl`): while
 * shut it drops every connection at once (the listener's reconnects fail fast), once opened
 * it relays them to the database. Closed with the scope.
 */
export const gate = Effect.fnUntraced(function*(url: Redacted.Redacted<string>) {
  const target = new URL(Redacted.value(url))
  let opened = false
  const server = net.createServer((socket) => {
    if (!opened) return void socket.destroy()
    const upstream = net.connect(Number(target.port || 5432), target.hostname)
    socket.pipe(upstream).pipe(socket)
    socket.on("error", () => upstream.destroy())
    upstream.on("error", () => socket.destroy())
  })
  const port = yield* Effect.acquireRelease(
    Effect.callback<number>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as net.AddressInfo).port)))
    }),
    () => Effect.sync(() => void server.close())
  )
  const through = new URL(target)
  through.hostname = "127.0.0.1"
  through.port = String(port)
  return {
    url: Redacted.make(through.toString()),
    open: Effect.sync(() => void (opened = true))
  }
})
