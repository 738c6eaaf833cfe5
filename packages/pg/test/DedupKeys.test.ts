// Dedup keys on enqueue: at most one open message per (topic, key), each mode against real
// message states (waiting, delivered, lease lapsed, settled), concurrent enqueues of one key,
// the caller's transaction, typed refusals; the in-memory driver follows the same rules.
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as Outbox from "../src/Outbox.js"
import * as OutboxMemory from "../src/OutboxMemory.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { substrate } from "./support.js"

interface Row {
  readonly id: string
  readonly payload: { readonly v: number }
  readonly dedup_key: string | null
  readonly open: boolean
  readonly due_in: number
}

/** The messages of a topic, in id order, with how many seconds until each is due (rounded). */
const rowsOf = (topic: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<Row>`SELECT o.id::text AS id, o.payload, o.dedup_key, (o.projected_at IS NULL AND o.dead_at IS NULL) AS open,
                    round(extract(epoch FROM o.available_at - now()))::int AS due_in
               FROM durable.outbox_messages o WHERE o.topic = ${topic} ORDER BY o.id`.pipe(Effect.orDie)
  )

describe("Outbox dedup keys", () => {
  it.layer(substrate({}, { maxConnections: 24 }), { timeout: "2 minutes", excludeTestServices: true })((it) => {
    it.effect("keep: a second enqueue of an open key is the first message; another topic or key is another; settled, the key is free", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const first = yield* outbox.enqueue("dd.keep", { v: 1 }, { dedupKey: "order-1" })
        expect(yield* outbox.enqueue("dd.keep", { v: 2 }, { dedupKey: "order-1" })).toBe(first)
        expect(yield* outbox.enqueue("dd.keep", { v: 3 }, { dedupKey: "order-1", dedupMode: "keep" })).toBe(first)
        const otherKey = yield* outbox.enqueue("dd.keep", { v: 4 }, { dedupKey: "order-2" })
        const otherTopic = yield* outbox.enqueue("dd.keep.other", { v: 5 }, { dedupKey: "order-1" })
        expect(new Set([first, otherKey, otherTopic]).size).toBe(3)
        expect((yield* rowsOf("dd.keep")).map((r) => r.payload.v)).toEqual([1, 4])
        // Delivered and marked: the key is free again.
        const claimed = yield* worker.claim({ worker: "w", topics: ["dd.keep"], limit: 10, lease: "1 minute" })
        yield* worker.markProjectedMany(claimed.map((m) => m.claim))
        const again = yield* outbox.enqueue("dd.keep", { v: 6 }, { dedupKey: "order-1" })
        expect(again).not.toBe(first)
        expect((yield* rowsOf("dd.keep")).filter((r) => r.open).map((r) => r.payload.v)).toEqual([6])
      }))

    it.effect("replace: a waiting message takes the new payload and delay (debounce); extend: only a later due time", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const id = yield* outbox.enqueue("dd.replace", { v: 1 }, { dedupKey: "k", delay: "60 seconds" })
        expect(
          yield* outbox.enqueue("dd.replace", { v: 2 }, { dedupKey: "k", dedupMode: "replace", delay: "300 seconds" })
        )
          .toBe(id)
        expect(yield* rowsOf("dd.replace")).toMatchObject([{ id, payload: { v: 2 }, due_in: 300 }])
        // extend: the payload stays; a shorter delay changes nothing, a longer one moves it.
        yield* outbox.enqueue("dd.replace", { v: 3 }, { dedupKey: "k", dedupMode: "extend", delay: "10 seconds" })
        expect(yield* rowsOf("dd.replace")).toMatchObject([{ id, payload: { v: 2 }, due_in: 300 }])
        yield* outbox.enqueue("dd.replace", { v: 4 }, { dedupKey: "k", dedupMode: "extend", delay: "900 seconds" })
        expect(yield* rowsOf("dd.replace")).toMatchObject([{ id, payload: { v: 2 }, due_in: 900 }])
      }))

    it.effect("replace while delivered: the delivery goes on and is marked, a new message takes the key and follows", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const first = yield* outbox.enqueue("dd.live", { v: 1 }, { dedupKey: "k" })
        const [held] = yield* worker.claim({ worker: "w", topics: ["dd.live"], limit: 1, lease: "1 minute" })
        const second = yield* outbox.enqueue("dd.live", { v: 2 }, { dedupKey: "k", dedupMode: "replace" })
        expect(second).not.toBe(first)
        expect(yield* outbox.enqueue("dd.live", { v: 3 }, { dedupKey: "k", dedupMode: "replace" })).toBe(second)
        expect(yield* rowsOf("dd.live")).toMatchObject([
          { id: first, payload: { v: 1 }, dedup_key: null },
          { id: second, payload: { v: 3 }, dedup_key: "k" }
        ])
        expect(yield* worker.markProjectedMany([held!.claim])).toMatchObject({ completed: [first], rejected: [] })
      }))

    it.effect("replace after a lapsed lease: the late holder's mark is refused and the new payload is delivered", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const id = yield* outbox.enqueue("dd.lapsed", { v: 1 }, { dedupKey: "k" })
        const [stale] = yield* worker.claim({ worker: "zombie", topics: ["dd.lapsed"], limit: 1, lease: "1 minute" })
        yield* sql`UPDATE durable.outbox SET claimed_until = now() - interval '1 second' WHERE id = ${id}::bigint`
        expect(yield* outbox.enqueue("dd.lapsed", { v: 2 }, { dedupKey: "k", dedupMode: "replace" })).toBe(id)
        const late = yield* worker.markProjectedMany([stale!.claim])
        expect([late.completed, late.rejected.length]).toEqual([[], 1])
        const [fresh] = yield* worker.claim({ worker: "w", topics: ["dd.lapsed"], limit: 1, lease: "1 minute" })
        expect(fresh).toMatchObject({ id, payload: { v: 2 } })
      }))

    it.effect("16 enqueues of one key at once: keep makes one message, all get its id; replace leaves one open message", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const ids = yield* Effect.all(
          Array.from({ length: 16 }, (_, i) => outbox.enqueue("dd.race", { v: i }, { dedupKey: "k" })),
          { concurrency: "unbounded" }
        )
        expect(new Set(ids).size).toBe(1)
        expect((yield* rowsOf("dd.race")).length).toBe(1)
        yield* Effect.all(
          Array.from(
            { length: 16 },
            (_, i) => outbox.enqueue("dd.race.replace", { v: i }, { dedupKey: "k", dedupMode: "replace" })
          ),
          { concurrency: "unbounded" }
        )
        const rows = yield* rowsOf("dd.race.replace")
        expect(rows.length).toBe(1)
        expect(rows[0]!.payload.v).toBeGreaterThanOrEqual(0)
      }))

    it.effect("in the caller's transaction: rolled back with it (the key stays free), committed with it", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        yield* sql.withTransaction(
          Effect.andThen(outbox.enqueue("dd.tx", { v: 1 }, { dedupKey: "k" }), Effect.fail("abort" as const))
        ).pipe(Effect.flip)
        expect(yield* rowsOf("dd.tx")).toEqual([])
        const id = yield* sql.withTransaction(
          Effect.andThen(
            outbox.enqueue("dd.tx", { v: 2 }, { dedupKey: "k" }),
            outbox.enqueue("dd.tx", { v: 3 }, { dedupKey: "k", dedupMode: "replace" })
          )
        )
        expect(yield* rowsOf("dd.tx")).toMatchObject([{ id, payload: { v: 3 } }])
      }))

    it.effect("bad input is a typed refusal naming the rule; nothing is written", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const refused = (options: Outbox.EnqueueOptions) =>
          Effect.map(Effect.flip(outbox.enqueue("dd.bad", { v: 1 }, options)), (e) =>
            e._tag === "InvalidInput" ? e.argument : e._tag)
        expect(yield* refused({ dedupKey: "" })).toBe("dedupKey")
        expect(yield* refused({ dedupKey: "x".repeat(300) })).toBe("dedupKey")
        expect(yield* refused({ dedupKey: "a\u0000b" })).toBe("dedupKey")
        expect(yield* refused({ dedupMode: "replace" })).toBe("dedupMode")
        expect(yield* refused({ dedupKey: "k", dedupMode: "merge" as never })).toBe("dedupMode")
        const many = yield* Effect.flip(
          outbox.enqueueMany([{ topic: "dd.bad", payload: {}, options: { dedupKey: "k" } }])
        )
        expect(many).toMatchObject({ _tag: "InvalidInput", argument: "dedupKey" })
        expect(yield* rowsOf("dd.bad")).toEqual([])
      }))
  })
})

describe("Outbox dedup keys, in memory", () => {
  it.layer(OutboxMemory.layer())((it) => {
    it.effect("the same rules: keep, replace and extend on a waiting message, a new one behind a delivered one", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const memory = yield* OutboxMemory.OutboxMemory
        const id = yield* outbox.enqueue("m", { v: 1 }, { dedupKey: "k", delay: "60 seconds" })
        expect(yield* outbox.enqueue("m", { v: 2 }, { dedupKey: "k" })).toBe(id)
        yield* outbox.enqueue("m", { v: 3 }, { dedupKey: "k", dedupMode: "replace", delay: "0 seconds" })
        yield* outbox.enqueue("m", { v: 4 }, { dedupKey: "k", dedupMode: "extend", delay: "0 seconds" })
        const [held] = yield* worker.claim({ worker: "w", limit: 1, lease: "1 minute" })
        expect(held).toMatchObject({ id, payload: { v: 3 } })
        const next = yield* outbox.enqueue("m", { v: 5 }, { dedupKey: "k", dedupMode: "replace" })
        expect(next).not.toBe(id)
        expect((yield* memory.rows).map((r) => [r.id, r.dedupKey])).toEqual([[id, null], [next, "k"]])
      }))
  })
})
