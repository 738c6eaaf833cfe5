import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "../src/DurableConfig.js"
import * as Inbox from "../src/Inbox.js"
import * as InboxAdmin from "../src/InboxAdmin.js"
import * as InboxWorker from "../src/InboxWorker.js"
import { barrier, eventually, substrate } from "./support.js"

const withEffectsTable = () =>
  Layer.effectDiscard(
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE applied (message_id text, note text)`)
  )

// The consumer's business effect: one row per application of a message.
const apply = (messageId: string, note = "") =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => Effect.as(sql`INSERT INTO applied VALUES (${messageId}, ${note})`, `applied ${messageId}`)
  )
const applications = (messageId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM applied WHERE message_id = ${messageId}`, (rows) =>
        rows[0]!.n)
  )

interface Receipt {
  readonly processed: boolean
  readonly dead: boolean
  readonly attempt_count: number
  readonly last_error: string | null
}
const receipt = (consumer: string, messageId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const table = sql.literal((yield* DurableSettings).table("inbox"))
    const rows = yield* sql<Receipt>`
      SELECT processed_at IS NOT NULL AS processed, dead_at IS NOT NULL AS dead, attempt_count, last_error
        FROM ${table} WHERE consumer = ${consumer} AND message_id = ${messageId}`
    return rows[0]
  })

let n = 0
const messageId = () => `msg-${++n}`

const suite = (schema: string) => {
  it.layer(withEffectsTable().pipe(Layer.provideMerge(substrate({ schema }))), { timeout: "60 seconds" })((it) => {
    it.effect("handle runs the effect once; a repeated delivery is a Duplicate that runs nothing", () =>
      Effect.gen(function*() {
        const inbox = yield* inboxServices
        const id = messageId()
        expect(yield* inbox.handle("billing", id, apply(id))).toEqual({ _tag: "Processed", value: `applied ${id}` })
        expect(yield* inbox.handle("billing", id, apply(id))).toEqual({ _tag: "Duplicate" })
        expect(yield* applications(id)).toBe(1)
        // Another consumer of the same message has its own receipt.
        expect((yield* inbox.handle("analytics", id, apply(id)))._tag).toBe("Processed")
        expect(yield* applications(id)).toBe(2)
        expect(yield* receipt("billing", id)).toMatchObject({ processed: true, dead: false })
      }))

    it.effect("a failing effect leaves no receipt, so the redelivery runs it", () =>
      Effect.gen(function*() {
        const inbox = yield* inboxServices
        const id = messageId()
        const failing = Effect.andThen(apply(id, "half"), Effect.fail("downstream refused" as const))
        expect(yield* Effect.flip(inbox.handle("billing", id, failing))).toBe("downstream refused")
        expect(yield* receipt("billing", id)).toBeUndefined()
        expect(yield* applications(id)).toBe(0)
        expect((yield* inbox.handle("billing", id, apply(id)))._tag).toBe("Processed")
        expect(yield* applications(id)).toBe(1)
      }))

    it.effect("8 concurrent deliveries of one message released at a barrier: the effect runs exactly once", () =>
      Effect.gen(function*() {
        const inbox = yield* inboxServices
        const id = messageId()
        const gate = yield* barrier
        let runs = 0
        const effect = Effect.andThen(Effect.sync(() => runs++), apply(id))
        const fibers = yield* Effect.forEach(
          Array.from({ length: 8 }),
          () => Effect.forkChild(Effect.andThen(gate.wait, inbox.handle("billing", id, effect)))
        )
        yield* gate.open
        const outcomes = yield* Fiber.joinAll(fibers)
        expect(outcomes.filter((o) => o._tag === "Processed")).toHaveLength(1)
        expect(outcomes.filter((o) => o._tag === "Duplicate")).toHaveLength(7)
        expect(runs).toBe(1)
        expect(yield* applications(id)).toBe(1)
      }))

    it.effect("bad consumer or message ids are typed errors", () =>
      Effect.gen(function*() {
        const inbox = yield* inboxServices
        expect(yield* Effect.flip(inbox.handle("", "m", Effect.void))).toMatchObject({
          _tag: "InvalidInput",
          argument: "consumer"
        })
        expect(yield* Effect.flip(inbox.handle("c", "x".repeat(257), Effect.void))).toMatchObject({
          argument: "messageId"
        })
        expect(yield* Effect.flip(inbox.receive("c", "m", { at: new Date() }))).toMatchObject({
          _tag: "UnsupportedJsonValue"
        })
        expect(yield* Effect.flip(inbox.receive("c", "m", "x".repeat(300 * 1024)))).toMatchObject({
          _tag: "PayloadTooLarge"
        })
      }))

    it.effect("stored mode: receive dedups; claim, complete, release and dead letters follow the outbox's fencing", () =>
      Effect.gen(function*() {
        const inbox = yield* inboxServices
        const consumer = `slow-${++n}`
        const [a, b, c] = [messageId(), messageId(), messageId()]
        expect(yield* inbox.receive(consumer, a, { n: 1 }, { traceparent: "00-x" })).toBe("New")
        expect(yield* inbox.receive(consumer, a, { n: 1 })).toBe("Duplicate")
        expect(yield* inbox.receive(consumer, b, { n: 2 })).toBe("New")
        expect(yield* inbox.receive(consumer, c, { n: 3 })).toBe("New")
        // handle() sees the stored receipt: a redelivery through either path is a duplicate.
        expect(yield* inbox.handle(consumer, a, Effect.die("must not run"))).toEqual({ _tag: "Duplicate" })

        const claimed = yield* inbox.claim({ consumer, worker: "w1", limit: 10, lease: "30 seconds" })
        expect(claimed.map((e) => [e.messageId, e.payload, e.attempt])).toEqual([[a, { n: 1 }, 1], [b, { n: 2 }, 1], [
          c,
          { n: 3 },
          1
        ]])
        expect(claimed[0]!.headers).toEqual({ traceparent: "00-x" })
        const [ea, eb, ec] = claimed
        yield* inbox.complete(ea!.claim)
        yield* inbox.complete(ea!.claim)
        expect((yield* Effect.flip(inbox.complete({ ...eb!.claim, worker: "w2" })))._tag).toBe("ClaimMismatch")
        expect((yield* Effect.flip(inbox.complete({ messageId: "999999997", worker: "w1", generation: 1 })))._tag).toBe(
          "MessageMissing"
        )
        expect(yield* inbox.release(eb!.claim, { error: "db busy", retryDelay: 0 })).toEqual({ dead: false })
        expect(yield* inbox.release(ec!.claim, { error: "bad payload", retryDelay: 0, permanent: true })).toEqual({
          dead: true
        })
        const again = yield* inbox.claim({ consumer, worker: "w2", limit: 10, lease: "30 seconds" })
        expect(again.map((e) => [e.messageId, e.attempt])).toEqual([[b, 2]])
        const done = yield* inbox.completeMany([again[0]!.claim, ea!.claim])
        expect([...done.completed].sort()).toEqual([again[0]!.id, ea!.id].sort())
        expect(yield* receipt(consumer, b)).toMatchObject({ processed: true, attempt_count: 2, last_error: null })

        const dead = yield* inbox.deadLetters({ consumer, limit: 10 })
        expect(dead.items.map((d) => [d.messageId, d.lastError])).toEqual([[
          c,
          "bad payload (dead: a permanent failure)"
        ]])
        expect(yield* inbox.redrive([ec!.id])).toEqual([ec!.id])
        const redriven = yield* inbox.claim({ consumer, worker: "w3", limit: 10, lease: "30 seconds" })
        expect(redriven.map((e) => [e.messageId, e.attempt])).toEqual([[c, 1]])
      }))

    it.effect("stored mode: a lost lease lets another worker take the entry; the first cannot complete it", () =>
      Effect.gen(function*() {
        const inbox = yield* inboxServices
        const consumer = `lease-${++n}`
        const id = messageId()
        yield* inbox.receive(consumer, id, {})
        const [first] = yield* inbox.claim({ consumer, worker: "w1", limit: 1, lease: "300 millis" })
        const [second] = yield* eventually(
          inbox.claim({ consumer, worker: "w2", limit: 1, lease: "30 seconds" }),
          (entries) => entries.length > 0
        )
        expect(second!.claim.generation).toBe(2)
        expect(yield* Effect.flip(inbox.complete(first!.claim))).toMatchObject({ _tag: "ClaimMismatch", worker: "w1" })
        yield* inbox.complete(second!.claim)
        expect(yield* receipt(consumer, id)).toMatchObject({ processed: true })
      }))

    it.effect("purge deletes receipts processed before the retention and keeps newer and unprocessed ones", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const inbox = yield* inboxServices
        const consumer = `purge-${++n}`
        const ids = [messageId(), messageId(), messageId()]
        for (const id of ids) yield* inbox.handle(consumer, id, Effect.void)
        const pending = messageId()
        yield* inbox.receive(consumer, pending, {})
        const table = sql.literal((yield* DurableSettings).table("inbox"))
        yield* sql`UPDATE ${table} SET processed_at = now() - interval '8 days'
                    WHERE consumer = ${consumer} AND message_id = ANY(${ids.slice(0, 2)}::text[])`
        expect(yield* inbox.purge({ olderThan: "7 days", batchSize: 1 })).toBe(2)
        const left = yield* sql<
          { message_id: string }
        >`SELECT message_id FROM ${table} WHERE consumer = ${consumer} ORDER BY id`
        expect(left.map((r) => r.message_id)).toEqual([ids[2], pending])
        // After the purge a redelivery of a purged message would run again: hence the retention rule.
        expect((yield* inbox.handle(consumer, ids[0]!, Effect.void))._tag).toBe("Processed")
      }))
  })
}

// These suites exercise the receiving, worker and operator sides of the inbox together.
const inboxServices = Effect.map(
  Effect.all([Inbox.Inbox, InboxWorker.InboxWorker, InboxAdmin.InboxAdmin]),
  ([receiver, worker, admin]) => ({ ...receiver, ...worker, ...admin })
)

describe("Inbox (schema durable)", () => suite("durable"))
describe("Inbox (schema \"Inbox_Mixed\")", () => suite("Inbox_Mixed"))
