import * as Durable from "@effect-durable/pg/Durable"
import * as Inbox from "@effect-durable/pg/Inbox"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Projector from "@effect-durable/projector/Projector"
import type { PublishError } from "@effect-durable/projector/Publisher"
import { eventually } from "@effect-durable/testing/Eventually"
import * as NatsServer from "@effect-durable/testing/NatsServer"
import * as Telemetry from "@effect-durable/testing/Telemetry"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { describe, expect, it } from "@effect/vitest"
import { RetentionPolicy, StorageType } from "@nats-io/jetstream"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import * as JetStreamExample from "../examples/jetstream.js"
import * as JetStreamInbox from "../src/JetStreamInbox.js"
import * as JetStreamPublisher from "../src/JetStreamPublisher.js"
import * as Nats from "../src/Nats.js"

const nats = NatsServer.availability()
if (!nats.available) {
  if (nats.required) throw new Error(`EFFECT_DURABLE_REQUIRE_NATS is set but ${nats.reason}`)
  console.warn(`NATS suite not run: ${nats.reason}`)
}

const NatsLive = Layer.unwrap(
  Effect.map(NatsServer.NatsServer, (server) => Nats.layer({ servers: server.url }))
).pipe(Layer.provideMerge(NatsServer.layer))

const Live = Layer.mergeAll(
  NatsLive,
  Durable.layerOver({ migrate: true }).pipe(Layer.provideMerge(TestDatabase.layerFresh({ maxConnections: 16 })))
)

const live = <A, E, R>(effect: Effect.Effect<A, E, R>) => TestClock.withLive(effect)

const addStream = (name: string, subjects: Array<string>) =>
  Effect.flatMap(Nats.Nats, ({ manager }) =>
    Effect.promise(() =>
      manager.streams.add({
        name,
        subjects,
        storage: StorageType.File,
        retention: RetentionPolicy.Limits,
        duplicate_window: 120_000_000_000 // 2 minutes, in nanoseconds
      })
    ))

const streamMessages = (name: string) =>
  Effect.flatMap(
    Nats.Nats,
    ({ manager }) => Effect.promise(() => manager.streams.info(name).then((info) => info.state.messages))
  )

const message = (id: string, topic: string, payload: unknown): OutboxWorker.OutboxMessage => ({
  id,
  topic,
  orderingKey: null,
  payload,
  headers: {},
  createdAt: "2026-11-29 15:00:00+00",
  attempt: 1,
  claim: { messageId: id, worker: "w", generation: 1 }
})

describe.skipIf(!nats.available)("NATS JetStream (real nats-server)", () => {
  it.layer(Live, { timeout: "2 minutes" })((it) => {
    it.effect("publishes with the outbox id as Nats-Msg-Id: the stream keeps one copy of a redelivery", () =>
      Effect.gen(function*() {
        yield* addStream("DEDUP", ["dedup.>"])
        const publisher = yield* JetStreamPublisher.make({ subject: (topic) => `dedup.${topic}` })
        yield* publisher.publish(message("101", "orders", { n: 1 }))
        yield* publisher.publish(message("101", "orders", { n: 1 }))
        yield* publisher.publish(message("102", "orders", { n: 2 }))
        expect(yield* streamMessages("DEDUP")).toBe(2)
      }))

    it.effect("a subject no stream accepts, or one that is not a subject, is a permanent failure", () =>
      Effect.gen(function*() {
        const publisher = yield* JetStreamPublisher.make({ ackTimeout: "2 seconds" })
        const nowhere = (yield* Effect.flip(publisher.publish(message("1", "no.stream.here", {})))) as PublishError
        expect(nowhere).toMatchObject({ _tag: "PublishError", retryable: false })
        const bad = (yield* Effect.flip(publisher.publish(message("2", "has space", {})))) as PublishError
        expect(bad).toMatchObject({ retryable: false })
      }))

    it.effect("an ack that does not come in time is a retryable failure", () =>
      Effect.gen(function*() {
        const { connection } = yield* Nats.Nats
        // A plain subscriber takes the publish and never acks it, as a stalled stream would.
        const silent = connection.subscribe("silent.subject")
        const publisher = yield* JetStreamPublisher.make({ ackTimeout: "300 millis" })
        const error = (yield* Effect.flip(live(publisher.publish(message("1", "silent.subject", {}))))) as PublishError
        silent.unsubscribe()
        expect(error).toMatchObject({ _tag: "PublishError", retryable: true })
      }))

    it.effect("a closed connection is a retryable failure", () =>
      Effect.gen(function*() {
        const server = yield* NatsServer.NatsServer
        yield* addStream("CLOSED", ["closed.>"])
        const error = yield* Effect.scoped(Effect.gen(function*() {
          const context = yield* Layer.build(Nats.layer({ servers: server.url }))
          const own = Context.get(context, Nats.Nats)
          yield* Effect.promise(() => own.connection.close())
          const publisher = yield* JetStreamPublisher.make().pipe(Effect.provide(context))
          return (yield* Effect.flip(publisher.publish(message("1", "closed.x", {})))) as PublishError
        }))
        expect(error.retryable).toBe(true)
      }))

    it.effect("the consumer applies each delivery once through the inbox, acking after commit; a failure is redelivered", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE consumed (message_id text, n int)`
        yield* addStream("CONSUME", ["consume.>"])
        const publisher = yield* JetStreamPublisher.make({ subject: (topic) => `consume.${topic}` })
        for (let i = 1; i <= 20; i++) yield* publisher.publish(message(String(i), "items", { n: i }))
        let failedOnce = false
        yield* JetStreamInbox.consume({
          stream: "CONSUME",
          durable: "consumed",
          retryDelay: "50 millis",
          handle: (delivery) =>
            Effect.gen(function*() {
              const n = (delivery.payload as { n: number }).n
              yield* sql`INSERT INTO consumed VALUES (${delivery.id}, ${n})`
              if (n === 7 && !failedOnce) {
                failedOnce = true
                return yield* Effect.fail("handler failed once")
              }
            })
        }).pipe(live)
        const rows = yield* eventually(
          sql<{ message_id: string; n: number }>`SELECT message_id, n FROM consumed ORDER BY n`,
          (rows) => rows.length === 20
        )
        expect(rows.map((r) => r.n)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1))
        // Republishing an already-applied message with a new broker id would run again; the
        // same id (a broker redelivery) is absorbed by the inbox.
        const inbox = yield* Inbox.Inbox
        expect(yield* inbox.handle("consumed", "7", Effect.die("must not run"))).toEqual({ _tag: "Duplicate" })
        expect(failedOnce).toBe(true)
      }))

    it.effect("with concurrency 8, eight deliveries are inside their inbox transactions at once; a bad concurrency or batch is refused by name", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE parallel (message_id text PRIMARY KEY)`
        yield* addStream("PARALLEL", ["parallel.>"])
        const publisher = yield* JetStreamPublisher.make({ subject: (topic) => `parallel.${topic}` })
        for (let i = 1; i <= 16; i++) yield* publisher.publish(message(String(i), "items", { n: i }))
        const bad = { concurrency: [0, 1.5, Number.NaN, 257], batch: [0, 2.5, Number.NaN, 10_001] }
        for (const [argument, values] of Object.entries(bad)) {
          for (const value of values) {
            expect(
              yield* Effect.flip(
                Effect.scoped(
                  JetStreamInbox.consume({
                    stream: "PARALLEL",
                    durable: "bad",
                    [argument]: value,
                    handle: () => Effect.void
                  })
                )
              )
            ).toMatchObject({ _tag: "InvalidInput", argument })
          }
        }
        // A barrier: each of the first eight handlers waits until all eight are inside; the most
        // inside at once is counted too (exactly eight: the limit holds as well as the overlap).
        const allInside = yield* Deferred.make<void>()
        let inside = 0
        let running = 0
        let most = 0
        let died = false
        yield* JetStreamInbox.consume({
          stream: "PARALLEL",
          durable: "parallel",
          concurrency: 8,
          retryDelay: "50 millis",
          handle: (delivery) =>
            Effect.gen(function*() {
              most = Math.max(most, ++running)
              yield* sql`INSERT INTO parallel VALUES (${delivery.id})`
              if (++inside === 8) yield* Deferred.succeed(allInside, undefined)
              yield* Deferred.await(allInside)
              // A defect once (its insert rolls back): logged and nak'ed, the consumer goes on.
              if (delivery.id === "16" && !died) {
                died = true
                return yield* Effect.die("a handler's defect")
              }
            }).pipe(Effect.ensuring(Effect.sync(() => running--)))
        }).pipe(live)
        // One at a time, the first handler would wait forever: the barrier opens only with eight at once.
        yield* Deferred.await(allInside).pipe(Effect.timeout("30 seconds"), live)
        const rows = yield* eventually(
          sql<{ message_id: string }>`SELECT message_id FROM parallel`,
          (rows) => rows.length === 16
        )
        expect(died).toBe(true)
        expect(most).toBe(8)
        // Every delivery acked: nothing pending or awaiting an ack on the consumer.
        yield* eventually(
          Effect.flatMap(
            Nats.Nats,
            ({ manager }) => Effect.promise(() => manager.consumers.info("PARALLEL", "parallel"))
          ),
          (info) => info.num_ack_pending === 0 && info.num_pending === 0
        )
        expect(new Set(rows.map((r) => r.message_id)).size).toBe(16)
      }))

    it.effect(
      "one trace across NATS: the producer's span, the projector's delivery, the inbox's apply and the handler's own span",
      () =>
        Effect.gen(function*() {
          const telemetry = Telemetry.make()
          const outbox = yield* Outbox.Outbox
          yield* addStream("TRACED", ["traced.>"])
          yield* outbox.enqueue("traced-order", { n: 1 }).pipe(Effect.withSpan("http.request"), telemetry.observed)
          const delivered = yield* Projector.drain({ topics: ["traced-order"] }).pipe(
            Effect.provide(JetStreamPublisher.layer({ subject: (topic) => `traced.${topic}` })),
            telemetry.observed
          )
          expect(delivered).toMatchObject({ delivered: 1 })
          const handled = yield* Deferred.make<void>()
          yield* JetStreamInbox.consume({
            stream: "TRACED",
            durable: "traced",
            handle: () => Deferred.succeed(handled, undefined).pipe(Effect.withSpan("invoice.write"))
          }).pipe(telemetry.observed, live)
          yield* Deferred.await(handled).pipe(live)
          const named = (name: string) => telemetry.spans.find((span) => span.name === name)!
          const [request, deliver, apply, own] = [
            "http.request",
            "projector.deliver",
            "JetStreamInbox.apply",
            "invoice.write"
          ]
            .map(named)
          expect(request).toBeDefined()
          for (const span of [deliver, apply, own]) expect(span?.traceId).toBe(request!.traceId)
          // Each descends from the one before (the NATS header carries the delivery's own span).
          const byId = new Map(telemetry.spans.map((span) => [span.spanId, span] as const))
          const descends = (span: Telemetry.RecordedSpan, from: Telemetry.RecordedSpan) => {
            let parent = Option.getOrUndefined(span.parent)
            while (parent !== undefined && parent.spanId !== from.spanId) {
              parent = Option.getOrUndefined(byId.get(parent.spanId)?.parent ?? Option.none())
            }
            return parent !== undefined
          }
          expect(descends(deliver!, request!)).toBe(true)
          expect(Option.getOrThrow(apply!.parent).spanId).toBe(deliver!.spanId)
          expect(apply!.kind).toBe("consumer")
          expect(descends(own!, apply!)).toBe(true)
          expect(descends(own!, request!)).toBe(true)
        })
    )

    it.effect("the README example: a committed order reaches the invoicing consumer once through JetStream", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const server = yield* NatsServer.NatsServer
        yield* sql`CREATE TABLE invoices (order_id int)`
        yield* addStream("ORDERS", ["orders.>"])
        yield* outbox.enqueue("order-placed", { orderId: 41 })
        const delivered = yield* Projector.drain({ topics: ["order-placed"] }).pipe(
          Effect.provide(JetStreamExample.Deliver(server.url))
        )
        expect(delivered).toMatchObject({ delivered: 1 })
        yield* JetStreamExample.invoicing.pipe(live)
        const rows = yield* eventually(
          sql<{ order_id: number }>`SELECT order_id FROM invoices`,
          (rows) => rows.length === 1
        )
        expect(rows).toEqual([{ order_id: 41 }])
      }))

    it.effect(
      "end to end: 10,000 messages from business transactions (some rolled back) reach the inbox exactly once",
      () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const outbox = yield* Outbox.Outbox
          yield* sql`CREATE TABLE applied (message_id text PRIMARY KEY)`
          yield* sql`CREATE TABLE business (id serial PRIMARY KEY, n int)`
          yield* addStream("E2E", ["e2e.>"])
          const committed = new Set<string>()
          const rolledBack = new Set<string>()
          // 10,000 business transactions in chunks: each writes a row and enqueues its message;
          // every 10th rolls back after enqueuing.
          for (let chunk = 0; chunk < 100; chunk++) {
            yield* Effect.forEach(Array.from({ length: 100 }, (_, i) => chunk * 100 + i), (n) =>
              sql.withTransaction(Effect.gen(function*() {
                yield* sql`INSERT INTO business (n) VALUES (${n})`
                const id = yield* outbox.enqueue("orders", { n })
                if (n % 10 === 9) {
                  rolledBack.add(id)
                  return yield* Effect.fail("rolled back" as const)
                }
                committed.add(id)
              })).pipe(Effect.ignore), { concurrency: 8, discard: true })
          }
          expect(committed.size).toBe(9000)
          // The projector publishes to JetStream; the consumer applies through the inbox.
          const projector = Projector.layer({ topics: ["orders"], pollInterval: "50 millis", concurrency: 32 }).pipe(
            Layer.provide(JetStreamPublisher.layer({
              subject: (topic) =>
                `e2e.${topic}`
            }))
          )
          yield* Layer.build(projector).pipe(live)
          const seen = new Map<string, number>()
          yield* JetStreamInbox.consume({
            stream: "E2E",
            durable: "e2e-applier",
            // Sixteen inbox transactions at once (one at a time applies about 200 a second here).
            concurrency: 16,
            handle: (delivery) =>
              Effect.andThen(
                Effect.sync(() =>
                  seen.set(delivery.id, (seen.get(delivery.id) ?? 0) + 1)
                ),
                sql`INSERT INTO applied VALUES (${delivery.id})`
              )
          }).pipe(live)
          const applied = yield* eventually(
            sql<{ message_id: string }>`SELECT message_id FROM applied`,
            (rows) => rows.length >= committed.size,
            120
          )
          const ids = new Set(applied.map((row) => row.message_id))
          expect(ids.size).toBe(applied.length) // the primary key would refuse a second application anyway
          expect([...ids].sort()).toEqual([...committed].sort())
          expect([...seen.keys()].filter((id) => rolledBack.has(id))).toEqual([])
          expect(yield* streamMessages("E2E")).toBe(9000)
        }),
      240_000
    )
  })
})
