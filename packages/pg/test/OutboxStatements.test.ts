// OutboxStatements.enqueueAfter: a message enqueued in the same statement as a write of the
// caller's, iff the write returned a row — atomic without a transaction of its own, in the
// caller's transaction when there is one, checked as `enqueue` checks before anything is written.
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import { DurableSettings } from "../src/DurableConfig.js"
import type * as Outbox from "../src/Outbox.js"
import * as OutboxStatements from "../src/OutboxStatements.js"
import { claimOf, enqueueAll, substrate } from "./support.js"

/** A table of the caller's, beside the outbox: its rows, by key. */
const orders = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS statement_orders (
               key text PRIMARY KEY, amount integer NOT NULL CHECK (amount > 0))`
  const insert = (key: string, amount: number) =>
    sql`INSERT INTO statement_orders (key, amount) VALUES (${key}, ${amount}) ON CONFLICT (key) DO NOTHING RETURNING key`
  const count = (key: string) =>
    Effect.map(
      sql<{ n: number }>`SELECT count(*)::int AS n FROM statement_orders WHERE key = ${key}`,
      (rows) => rows[0]!.n
    )
  return { insert, count }
})

/** The open messages of `topic`, with what the tests read of them. */
const messagesOf = (topic: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    return yield* sql<
      { id: string; payload: unknown; ordering_key: string | null; group_key: string; delayed: boolean }
    >`
      SELECT id::text, payload, ordering_key, group_key, available_at > now() AS delayed
        FROM ${sql.literal(settings.table("outbox"))} WHERE topic = ${topic} ORDER BY id`
  })

describe("OutboxStatements", () => {
  it.layer(substrate(), { timeout: "60 seconds" })((it) => {
    it.effect("enqueues the message iff the write returned a row, with every option of enqueue", () =>
      Effect.gen(function*() {
        const statements = yield* OutboxStatements.OutboxStatements
        const table = yield* orders
        const topic = TestSubstrate.freshName("after")
        const message: Outbox.NewMessage = {
          topic,
          payload: { order: "o-1" },
          options: { orderingKey: "customer-7", group: "tenant-3", delay: "1 hour" }
        }
        const id = yield* statements.enqueueAfter(table.insert("o-1", 10), message)
        expect(id).toMatch(/^\d+$/)
        // The same key again: the write returns nothing, so nothing is enqueued.
        expect(yield* statements.enqueueAfter(table.insert("o-1", 10), message)).toBeUndefined()
        expect(yield* table.count("o-1")).toBe(1)
        expect(yield* messagesOf(topic)).toEqual([
          { id, payload: { order: "o-1" }, ordering_key: "customer-7", group_key: "tenant-3", delayed: true }
        ])
      }))

    it.effect("enqueueEachAfter enqueues, in one statement, the message of each key the write returned, in order", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const statements = yield* OutboxStatements.OutboxStatements
        yield* orders
        const topic = TestSubstrate.freshName("each")
        // o-b stands already: the write returns a and c only.
        yield* sql`INSERT INTO statement_orders (key, amount) VALUES ('each-b', 1) ON CONFLICT DO NOTHING`
        const keys = ["each-a", "each-b", "each-c"]
        const write = sql`INSERT INTO statement_orders (key, amount) SELECT k, 1 FROM unnest(${keys}::text[]) AS k
                          ON CONFLICT (key) DO NOTHING RETURNING key`
        const written = yield* statements.enqueueEachAfter(
          write,
          keys.map((key) => ({ key, message: { topic, payload: { order: key }, options: { orderingKey: key } } }))
        )
        expect([...written].sort()).toEqual(["each-a", "each-c"])
        expect((yield* messagesOf(topic)).map((m) => [m.payload, m.ordering_key])).toEqual([
          [{ order: "each-a" }, "each-a"],
          [{ order: "each-c" }, "each-c"]
        ])
        // A bad message among them: typed, before the write runs.
        const refused = yield* Effect.flip(statements.enqueueEachAfter(
          sql`INSERT INTO statement_orders (key, amount) VALUES ('each-d', 1) RETURNING key`,
          [{ key: "each-d", message: { topic: "", payload: {} } }]
        ))
        expect(refused).toMatchObject({ _tag: "InvalidInput" })
        expect(
          yield* Effect.map(
            sql<{ n: number }>`SELECT count(*)::int AS n FROM statement_orders WHERE key = 'each-d'`,
            (r) => r[0]!.n
          )
        ).toBe(0)
      }))

    it.effect("is one statement: a write that fails enqueues nothing, a bad message writes nothing", () =>
      Effect.gen(function*() {
        const statements = yield* OutboxStatements.OutboxStatements
        const table = yield* orders
        const topic = TestSubstrate.freshName("after")
        // The CHECK refuses the write: no row, no message.
        const failed = yield* Effect.flip(statements.enqueueAfter(table.insert("o-2", -1), { topic, payload: {} }))
        expect(failed._tag).toBe("DatabaseError")
        // A message enqueue refuses: typed, before the write runs.
        const badTopic = yield* Effect.flip(statements.enqueueAfter(table.insert("o-3", 1), { topic: "", payload: {} }))
        expect(badTopic).toMatchObject({ _tag: "InvalidInput", argument: "topic" })
        const dedup = yield* Effect.flip(
          statements.enqueueAfter(table.insert("o-4", 1), { topic, payload: {}, options: { dedupKey: "k" } })
        )
        expect(dedup).toMatchObject({ _tag: "InvalidInput", argument: "options.dedupKey" })
        expect([yield* table.count("o-2"), yield* table.count("o-3"), yield* table.count("o-4")]).toEqual([0, 0, 0])
        expect(yield* messagesOf(topic)).toEqual([])
      }))

    it.effect("joins the caller's transaction: rolled back with it, committed with it, usable after a refusal", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const statements = yield* OutboxStatements.OutboxStatements
        const table = yield* orders
        const topic = TestSubstrate.freshName("after")
        const rolledBack = yield* Effect.flip(sql.withTransaction(Effect.gen(function*() {
          yield* statements.enqueueAfter(table.insert("o-5", 1), { topic, payload: 5 })
          return yield* Effect.fail("the caller changed its mind" as const)
        })))
        expect(rolledBack).toBe("the caller changed its mind")
        expect(yield* table.count("o-5")).toBe(0)
        expect(yield* messagesOf(topic)).toEqual([])
        const id = yield* sql.withTransaction(Effect.gen(function*() {
          // Refused before any statement: the transaction goes on.
          yield* Effect.flip(statements.enqueueAfter(table.insert("o-6", 1), { topic: "", payload: 6 }))
          return yield* statements.enqueueAfter(table.insert("o-6", 1), { topic, payload: 6 })
        }))
        expect(yield* table.count("o-6")).toBe(1)
        expect((yield* messagesOf(topic)).map((m) => m.id)).toEqual([id])
      }))

    it.effect("whileHolding writes only while the claim holds its message, its lease running", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const settings = yield* DurableSettings
        const statements = yield* OutboxStatements.OutboxStatements
        const table = yield* orders
        const topic = TestSubstrate.freshName("held")
        yield* enqueueAll(topic, 1)
        const [message] = yield* claimOf("w1", [topic], 1)
        const write = (key: string) => (held: Statement.Fragment) =>
          sql`INSERT INTO statement_orders (key, amount) SELECT ${key}, 1 WHERE ${held} RETURNING key`
        expect(yield* statements.whileHolding(message!.claim, write("h-1"))).toEqual({
          held: true,
          rows: [{ key: "h-1" }]
        })
        // Another claim's generation, another worker, a claim that is not one: not held, nothing written.
        const stale = { ...message!.claim, generation: message!.claim.generation + 1 }
        const other = { ...message!.claim, worker: "w2" }
        for (const claim of [stale, other, { messageId: "x" } as never]) {
          expect(yield* statements.whileHolding(claim, write("h-2"))).toEqual({ held: false, rows: [] })
        }
        // The lease ran out (a frozen worker): not held either.
        yield* sql`UPDATE ${sql.literal(settings.table("outbox"))} SET claimed_until = now() - interval '1 second'
                    WHERE topic = ${topic}`
        expect(yield* statements.whileHolding(message!.claim, write("h-3"))).toEqual({ held: false, rows: [] })
        expect([yield* table.count("h-1"), yield* table.count("h-2"), yield* table.count("h-3")]).toEqual([1, 0, 0])
      }))
  })
})
