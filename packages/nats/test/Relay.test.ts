// The relay over logical decoding (`@effect-durable/projector/Relay`, `@effect-durable/pg/OutboxLog`)
// on a PostgreSQL of its own started with `wal_level = logical`, into a real nats-server's
// JetStream: commit order, each message once, nothing rolled back, nothing lost when the slot
// is lost, one relay per slot.
import { InvalidInput, LogicalDecodingUnavailable } from "@effect-durable/core/Errors"
import * as Durable from "@effect-durable/pg/Durable"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxLog from "@effect-durable/pg/OutboxLog"
import type { OutboxMessage } from "@effect-durable/pg/OutboxWorker"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as Relay from "@effect-durable/projector/Relay"
import { eventually } from "@effect-durable/testing/Eventually"
import * as NatsServer from "@effect-durable/testing/NatsServer"
import * as PgServer from "@effect-durable/testing/PgServer"
import { describe, expect, it } from "@effect/vitest"
import { RetentionPolicy, StorageType } from "@nats-io/jetstream"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import * as fc from "fast-check"
import * as RelayExample from "../examples/relay.js"
import * as JetStreamPublisher from "../src/JetStreamPublisher.js"
import * as Nats from "../src/Nats.js"

const nats = NatsServer.availability()
if (!nats.available) {
  if (nats.required) throw new Error(`EFFECT_DURABLE_REQUIRE_NATS is set but ${nats.reason}`)
  console.warn(`relay suite not run: ${nats.reason}`)
}

/** A PostgreSQL that decodes its WAL, with the substrate migrated on it. */
const logicalSubstrate = (settings: Readonly<Record<string, string>> = {}) =>
  Layer.unwrap(
    Effect.map(
      PgServer.PgServer,
      (server) => Durable.layer({ connection: { url: server.url("postgres") }, migrate: true })
    )
  ).pipe(
    // Commits flushed before they return, as in production: a step right after one reads it.
    Layer.provideMerge(
      PgServer.layerEmbedded({ settings: { wal_level: "logical", synchronous_commit: "on", ...settings } })
    )
  )

const NatsLive = Layer.unwrap(
  Effect.map(NatsServer.NatsServer, (server) => Nats.layer({ servers: server.url }))
).pipe(Layer.provideMerge(NatsServer.layer))

/**
 * A PostgreSQL 18 of the suite's own, not the suites' shared server: a relay decodes the WAL of
 * the whole cluster at every step, and on a server every suite writes to at once that is CPU
 * the other suites wait for.
 */
const Substrate = logicalSubstrate()

const Live = Layer.mergeAll(NatsLive, Substrate)

let streams = 0
/** A stream of its own for a test: its subjects are `<prefix>.<topic>`. */
const addStream = Effect.gen(function*() {
  const { manager } = yield* Nats.Nats
  const name = `RELAY${++streams}`
  const prefix = `relay${streams}`
  yield* Effect.promise(() =>
    manager.streams.add({
      name,
      subjects: [`${prefix}.>`],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      duplicate_window: 120_000_000_000
    })
  )
  return { name, subject: (topic: string) => `${prefix}.${topic}` }
})

/** The stream's messages in its order: each one's payload `n`. */
const streamed = (name: string) =>
  Effect.flatMap(Nats.Nats, ({ manager }) =>
    Effect.promise(async () => {
      const count = (await manager.streams.info(name)).state.messages
      const ns: Array<unknown> = []
      for (let seq = 1; seq <= count; seq++) {
        const stored = await manager.streams.getMessage(name, { seq })
        ns.push((stored!.json() as { n: unknown }).n)
      }
      return ns
    }))

const relayTo = (stream: { readonly subject: (topic: string) => string }, options: Relay.RelayOptions) =>
  Layer.build(Relay.layer(options).pipe(Layer.provide(JetStreamPublisher.layer({ subject: stream.subject }))))

/** Enqueues, each committed to disk before it returns (as by default), so a step right after it can decode it. */
const enqueueAll = (topic: string, ns: ReadonlyArray<number | string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const outbox = yield* Outbox.Outbox
    return yield* Effect.forEach(ns, (n) =>
      sql.withTransaction(
        Effect.andThen(sql`SELECT set_config('synchronous_commit', 'on', true)`, outbox.enqueue(topic, { n }))
      ))
  })

describe.skipIf(!nats.available)("Relay over logical decoding (real PostgreSQL, real JetStream)", () => {
  it.layer(Live, { timeout: "2 minutes", excludeTestServices: true })((it) => {
    it.effect(
      "publishes in commit order, not id order: a late commit comes after the ones before it, without waiting for it",
      () =>
        Effect.scoped(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const outbox = yield* Outbox.Outbox
          const stream = yield* addStream
          // Open before the slot exists: published from the table when the relay starts.
          yield* enqueueAll("orders", [1, 2])
          yield* relayTo(stream, { slot: "commit_order", topics: ["orders"], idle: "20 millis" })
          yield* eventually(streamed(stream.name), (ns) => ns.length === 2)

          // A writer takes its id first and commits last.
          const written = yield* Deferred.make<void>()
          const gate = yield* Deferred.make<void>()
          const late = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
            yield* outbox.enqueue("orders", { n: "late" })
            yield* Deferred.succeed(written, undefined)
            yield* Deferred.await(gate)
          })))
          yield* Deferred.await(written)
          yield* enqueueAll("orders", [3, 4])
          yield* enqueueAll("other", [99])
          // The relay does not wait for the open transaction (a feed would: it reads below the horizon).
          expect(yield* eventually(streamed(stream.name), (ns) => ns.length === 4)).toEqual([1, 2, 3, 4])
          yield* Deferred.succeed(gate, undefined)
          yield* Fiber.join(late)
          expect(yield* eventually(streamed(stream.name), (ns) => ns.length === 5)).toEqual([1, 2, 3, 4, "late"])
          // Relayed messages are settled in the history; the other topic's stays open for its projector.
          const [open] = yield* sql<{ relayed: number; other: number }>`
            SELECT count(*) FILTER (WHERE topic = 'orders')::int AS relayed, count(*) FILTER (WHERE topic = 'other')::int AS other
              FROM durable.outbox`
          expect(open).toEqual({ relayed: 0, other: 1 })
        })),
      { timeout: 60_000 }
    )

    it.effect("the docs' example relays two topics to JetStream in commit order", () =>
      Effect.scoped(Effect.gen(function*() {
        const { manager } = yield* Nats.Nats
        const server = yield* NatsServer.NatsServer
        yield* Effect.promise(() =>
          manager.streams.add({ name: "ORDERS_RELAYED", subjects: ["orders.>"], storage: StorageType.File })
        )
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        yield* Layer.build(RelayExample.OrdersToJetStream(server.url))
        yield* sql.withTransaction(
          Effect.andThen(
            outbox.enqueue("order-placed", { n: "placed 1" }),
            outbox.enqueue("order-cancelled", { n: "cancelled 1" })
          )
        )
        yield* outbox.enqueue("order-placed", { n: "placed 2" })
        expect(yield* eventually(streamed("ORDERS_RELAYED"), (ns) => ns.length === 3)).toEqual([
          "placed 1",
          "cancelled 1",
          "placed 2"
        ])
      })))

    it.effect("a rolled-back enqueue is never published", () =>
      Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const stream = yield* addStream
        yield* relayTo(stream, { slot: "rollbacks", topics: ["refunds"], idle: "20 millis" })
        yield* sql.withTransaction(Effect.andThen(enqueueAll("refunds", ["rolled back"]), Effect.fail("abort"))).pipe(
          Effect.ignore
        )
        yield* enqueueAll("refunds", [1])
        yield* enqueueAll("refunds", [2])
        // The rolled-back transaction is before both in the WAL: had it been published, it would be first.
        expect(yield* eventually(streamed(stream.name), (ns) => ns.length >= 2)).toEqual([1, 2])
      })), { timeout: 60_000 })

    it.effect(
      "a step that dies after publishing, before settling, publishes again: the stream keeps one copy of each",
      () =>
        Effect.gen(function*() {
          const stream = yield* addStream
          const log = yield* OutboxLog.make
          yield* log.ensure("crash_between", ["invoices"])
          yield* enqueueAll("invoices", [1, 2, 3])
          const jetstream = yield* JetStreamPublisher.make({ subject: stream.subject })
          const toOutcome = (message: OutboxMessage) =>
            Effect.as(Effect.orDie(jetstream.publish(message)), { _tag: "Delivered" } as const)
          // Published, then the process dies before the settle commits.
          const died = yield* Effect.exit(log.step("crash_between", {
            topics: ["invoices"],
            publish: (message) =>
              (message.payload as { n: number }).n === 3
                ? Effect.andThen(toOutcome(message), Effect.die("killed after publishing"))
                : toOutcome(message)
          }))
          expect(died._tag).toBe("Failure")
          expect(yield* streamed(stream.name)).toEqual([1, 2, 3])
          // Nothing was settled and the slot did not move: the next step publishes all three again.
          const again = yield* log.step("crash_between", { topics: ["invoices"], publish: toOutcome })
          expect(again).toMatchObject({ delivered: 3, dead: 0, retry: null })
          expect(yield* streamed(stream.name)).toEqual([1, 2, 3])
          // And then they are settled: a third step finds nothing.
          const third = yield* log.step("crash_between", { topics: ["invoices"], publish: toOutcome })
          expect(third).toMatchObject({ transactions: 0, delivered: 0 })
          yield* log.drop("crash_between")
        }),
      { timeout: 60_000 }
    )

    it.effect(
      "one relay per slot: two running at once deliver each message exactly once, in commit order",
      () =>
        Effect.scoped(Effect.gen(function*() {
          const delivered: Array<number> = []
          const counting = Publisher.layerHandler((message) =>
            Effect.sync(() => {
              delivered.push((message.payload as { n: number }).n)
            })
          )
          const relay = () =>
            Layer.build(
              Relay.layer({ slot: "shared", topics: ["shipments"], idle: "5 millis", limit: 50 }).pipe(
                Layer.provide(counting)
              )
            )
          yield* relay()
          yield* relay()
          const ns = Array.from({ length: 300 }, (_, i) => i)
          const outbox = yield* Outbox.Outbox
          for (let i = 0; i < ns.length; i += 10) {
            yield* outbox.enqueueMany(ns.slice(i, i + 10).map((n) => ({ topic: "shipments", payload: { n } })))
          }
          // A last message after them all: once it is delivered, everything before it was.
          yield* outbox.enqueue("shipments", { n: ns.length })
          yield* eventually(Effect.sync(() => delivered.length), (count) => count > ns.length)
          expect(delivered).toEqual([...ns, ns.length])
        })),
      { timeout: 60_000 }
    )

    it.effect("a retryable failure stops the relay before the message; a permanent one sends it to the dead letters", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const log = yield* OutboxLog.make
        yield* log.ensure("failures", ["mail"])
        yield* enqueueAll("mail", [1, 2, 3])
        const seen: Array<number> = []
        const outcome = (message: OutboxMessage): Effect.Effect<OutboxLog.Outcome> => {
          const n = (message.payload as { n: number }).n
          seen.push(n)
          return Effect.succeed(
            n === 1
              ? { _tag: "Dead", reason: "no such mailbox" }
              : n === 3 && seen.filter((m) => m === 3).length === 1
              ? { _tag: "Retry", reason: "busy", afterMillis: 10 }
              : { _tag: "Delivered" }
          )
        }
        const first = yield* log.step("failures", { topics: ["mail"], publish: outcome })
        expect(first).toMatchObject({ dead: 1, delivered: 1, retry: { reason: "busy", afterMillis: 10 } })
        const second = yield* log.step("failures", { topics: ["mail"], publish: outcome })
        expect(second).toMatchObject({ dead: 0, delivered: 1, retry: null })
        expect(seen).toEqual([1, 2, 3, 3])
        const [dead] = yield* sql<{ last_error: string }>`SELECT last_error FROM durable.outbox_dead
                                                          WHERE payload->>'n' = '1' AND topic = 'mail'`
        expect(dead!.last_error).toContain("no such mailbox")
        yield* log.drop("failures")
      }))

    it.effect(
      "the sweep is kept in the database: a relay that died before it sweeps at its next start, and a topic added to a slot is swept",
      () =>
        Effect.gen(function*() {
          const log = yield* OutboxLog.make
          const published: Array<unknown> = []
          const publish = (message: OutboxMessage) =>
            Effect.sync((): OutboxLog.Outcome => {
              published.push((message.payload as { n: unknown }).n)
              return { _tag: "Delivered" }
            })
          yield* enqueueAll("sweep.a", ["a open before"])
          expect(yield* log.ensure("sweeps", ["sweep.a"])).toEqual({ sweep: true })
          // The relay dies before its sweep: the next start sweeps.
          expect(yield* log.ensure("sweeps", ["sweep.a"])).toEqual({ sweep: true })
          expect(yield* log.sweep("sweeps", { topics: ["sweep.a"], publish })).toMatchObject({ delivered: 1 })
          yield* log.swept("sweeps", ["sweep.a"])
          expect(yield* log.ensure("sweeps", ["sweep.a"])).toEqual({ sweep: false })

          // A message on a topic the slot does not relay yet: the slot goes past it.
          yield* enqueueAll("sweep.b", ["b before its topic was added"])
          yield* enqueueAll("sweep.a", ["a after"])
          expect(yield* log.step("sweeps", { topics: ["sweep.a"], publish })).toMatchObject({ delivered: 1 })
          expect(yield* log.ensure("sweeps", ["sweep.a", "sweep.b"])).toEqual({ sweep: true })
          yield* log.sweep("sweeps", { topics: ["sweep.a", "sweep.b"], publish })
          expect(published).toEqual(["a open before", "a after", "b before its topic was added"])
          // Fewer topics than swept: nothing new to sweep.
          yield* log.swept("sweeps", ["sweep.a", "sweep.b"])
          expect(yield* log.ensure("sweeps", ["sweep.b"])).toEqual({ sweep: false })
          yield* log.drop("sweeps")
        })
    )

    it.effect(
      "an idle relay lets go of the WAL the rest of the database writes (its heartbeat)",
      () =>
        Effect.scoped(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const stream = yield* addStream
          yield* relayTo(stream, { slot: "heartbeats", topics: ["quiet"], idle: "20 millis", heartbeat: "50 millis" })
          const log = yield* OutboxLog.make
          yield* sql`CREATE TABLE busy (id bigserial PRIMARY KEY, filler text)`
          yield* sql`INSERT INTO busy (filler) SELECT repeat('x', 1000) FROM generate_series(1, 5000)`
          const [{ written }] = (yield* sql<{ written: string }>`SELECT pg_current_wal_lsn()::text AS written`) as [
            { written: string }
          ]
          // No message of its topics, yet the slot is confirmed past all of it.
          yield* eventually(
            Effect.flatMap(
              log.status("heartbeats"),
              ([slot]) => sql<{ past: boolean }>`SELECT ${slot!.confirmedThrough}::pg_lsn >= ${written}::pg_lsn AS past`
            ),
            ([row]) => row!.past
          )
        })),
      { timeout: 60_000 }
    )

    it.effect("bad input is a typed error naming the rule, and nothing is made", () =>
      Effect.gen(function*() {
        const log = yield* OutboxLog.make
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.string({ maxLength: 70 }), async (slot) => {
              if (/^[a-z_][a-z0-9_]{0,62}$/.test(slot)) return
              const error = await Effect.runPromise(Effect.flip(log.ensure(slot, ["a"])))
              expect(error).toBeInstanceOf(InvalidInput)
              expect((error as InvalidInput).argument).toBe("slot")
            }),
            { numRuns: 50 }
          )
        )
        const noTopics = yield* Effect.flip(Relay.start({ slot: "typed", topics: [] }).pipe(Effect.scoped))
        expect(noTopics).toMatchObject({ _tag: "InvalidInput", argument: "topics" })
        const noSlot = yield* Effect.flip(Relay.start({ slot: "Not A Slot", topics: ["a"] }).pipe(Effect.scoped))
        expect(noSlot).toMatchObject({ _tag: "InvalidInput", argument: "slot" })
        const sql = yield* SqlClient.SqlClient
        expect(yield* sql`SELECT 1 FROM pg_replication_slots WHERE slot_name = 'typed'`).toEqual([])
      }).pipe(Effect.provide(JetStreamPublisher.layer())))
  })

  it.live("a server that cannot decode refuses the relay, typed, naming the rule", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Relay.start({ slot: "refused", topics: ["orders"] }).pipe(
          Effect.scoped,
          Effect.provide(
            Layer.mergeAll(
              Publisher.layerHandler(() => Effect.void),
              // A server of the default settings: wal_level = replica.
              Layer.unwrap(
                Effect.map(
                  PgServer.PgServer,
                  (server) => Durable.layer({ connection: { url: server.url("postgres") }, migrate: true })
                )
              ).pipe(Layer.provide(PgServer.layerEmbedded()))
            )
          )
        )
      )
      expect(error).toBeInstanceOf(LogicalDecodingUnavailable)
      expect((error as LogicalDecodingUnavailable).rule).toContain("wal_level is replica")
    }), { timeout: 60_000 })

  it.live(
    "a slot that lost its WAL is made again, and what it had not relayed is published from the table",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(
          Layer.mergeAll(NatsLive, logicalSubstrate({ max_slot_wal_keep_size: "1MB" }))
        )
        const run = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provide(effect, context)
        yield* run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const stream = yield* addStream
          const log = yield* OutboxLog.make
          yield* log.ensure("lost", ["audit"])
          yield* enqueueAll("audit", [1, 2])
          // The relay is away while more than the slot may keep is written: the checkpoint ends it.
          yield* sql`CREATE TABLE churn (filler text)`
          for (let round = 0; round < 3; round++) {
            yield* sql`INSERT INTO churn SELECT repeat('x', 1000) FROM generate_series(1, 20000)`
            yield* sql`SELECT pg_switch_wal()::text`
            yield* sql`CHECKPOINT`
          }
          const [slot] = yield* log.status("lost")
          expect(slot!.walStatus).toBe("lost")
          yield* enqueueAll("audit", [3])
          yield* relayTo(stream, { slot: "lost", topics: ["audit"], idle: "20 millis" })
          expect(yield* eventually(streamed(stream.name), (ns) => ns.length >= 3)).toEqual([1, 2, 3])
          yield* enqueueAll("audit", [4])
          expect(yield* eventually(streamed(stream.name), (ns) => ns.length >= 4)).toEqual([1, 2, 3, 4])
          const [remade] = yield* log.status("lost")
          expect(remade!.walStatus).not.toBe("lost")
        }))
      })),
    { timeout: 120_000 }
  )
})
