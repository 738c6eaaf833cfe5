// D13: a message reopened by an operator (restore, redrive, replay) whose dedup key an open
// message now holds. The unique index on open dedup keys (migration 15) refused the whole
// statement: a restore failed as if the database were down, a bulk redrive stopped at 0 of N,
// and inside a caller's transaction it aborted that transaction. Now such a row stays as it
// is (and is reported as not moved); the rest of the action goes on.
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as Stream from "effect/Stream"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxBulk from "../src/OutboxBulk.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { substrate } from "./support.js"

/** Enqueues one message with `dedupKey` on `topic`; its id. */
const withKey = (topic: string, dedupKey: string, n = 0) =>
  Effect.flatMap(Outbox.Outbox, (outbox) => outbox.enqueue(topic, { n }, { dedupKey }))

/** Claims and marks every ready message of `topic` dead (a permanent failure). */
const killAll = (topic: string) =>
  Effect.gen(function*() {
    const worker = yield* OutboxWorker.OutboxWorker
    const claimed = yield* worker.claim({ worker: "test", topics: [topic], limit: 100, lease: "1 minute" })
    for (const m of claimed) yield* worker.release(m.claim, { error: "boom", retryDelay: 0, permanent: true })
    return claimed.map((m) => m.id)
  })

const openWithKey = (topic: string, dedupKey: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ id: string }>`SELECT id::text AS id FROM durable.outbox
                         WHERE topic = ${topic} AND dedup_key = ${dedupKey} AND projected_at IS NULL AND dead_at IS NULL`
      .pipe(Effect.map((rows) => rows.map((row) => row.id))))

describe("D13: reopening a message whose dedup key an open one holds", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("restore leaves the cancelled one as it is, the holder keeps the key; inside a caller's transaction, that transaction stays usable", () =>
      Effect.gen(function*() {
        const admin = yield* OutboxAdmin.OutboxAdmin
        const sql = yield* SqlClient.SqlClient
        const first = yield* withKey("d13.restore", "k")
        yield* admin.cancel([first], { by: "test" })
        const second = yield* withKey("d13.restore", "k", 1)
        expect(second).not.toBe(first)
        const [restored, after] = yield* sql.withTransaction(Effect.all([
          admin.restore([first]),
          sql<{ one: number }>`SELECT 1 AS one`
        ]))
        expect(restored).toEqual([])
        expect(after).toEqual([{ one: 1 }])
        expect(yield* openWithKey("d13.restore", "k")).toEqual([second])
        // Once the holder is done, the cancelled one can come back.
        yield* admin.cancel([second], { by: "test" })
        expect(yield* admin.restore([first])).toEqual([first])
        expect(yield* openWithKey("d13.restore", "k")).toEqual([first])
      }))

    it.effect("redrive and replay do the same; of two closed messages with one key asked at once, the first reopens", () =>
      Effect.gen(function*() {
        const admin = yield* OutboxAdmin.OutboxAdmin
        const [dead1] = yield* Effect.andThen(withKey("d13.redrive", "k"), killAll("d13.redrive"))
        const [dead2] = yield* Effect.andThen(withKey("d13.redrive", "k", 1), killAll("d13.redrive"))
        const holder = yield* withKey("d13.redrive", "k", 2)
        expect(yield* admin.redrive([dead1!, dead2!])).toEqual([])
        yield* killAll("d13.redrive")
        expect(yield* admin.redrive([dead2!, dead1!, holder])).toEqual([dead1])
        expect(yield* openWithKey("d13.redrive", "k")).toEqual([dead1])
        // Replay of a projected message whose key is held.
        const projected = yield* withKey("d13.replay", "r")
        const worker = yield* OutboxWorker.OutboxWorker
        const [claimed] = yield* worker.claim({ worker: "t", topics: ["d13.replay"], limit: 1, lease: "1 minute" })
        yield* worker.markProjected(claimed!.claim)
        const open = yield* withKey("d13.replay", "r", 1)
        expect(yield* admin.replay([projected])).toEqual([])
        expect(yield* openWithKey("d13.replay", "r")).toEqual([open])
      }))

    it.effect("a bulk redrive goes past the one whose key is held and redrives the rest of its batch and the next", () =>
      Effect.gen(function*() {
        const bulk = yield* OutboxBulk.OutboxBulk
        const outbox = yield* Outbox.Outbox
        yield* outbox.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ topic: "d13.bulk", payload: { i } })))
        yield* withKey("d13.bulk", "held")
        yield* outbox.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ topic: "d13.bulk", payload: { i } })))
        const dead = yield* killAll("d13.bulk")
        yield* withKey("d13.bulk", "held", 1)
        const progress = yield* Stream.runCollect(bulk.redriveMatching({ topic: "d13.bulk" }, { batchSize: 3 }))
        const redriven = progress.flatMap((p) => p.ids)
        expect(redriven.length).toBe(10)
        expect(dead.filter((id) => !redriven.includes(id)).length).toBe(1)
        expect(progress.at(-1)!.total).toBe(10)
      }))
  })
})

describe("a bulk action's filter", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("a field it does not know (topics for topic) is a typed refusal naming it, never 'every dead letter'", () =>
      Effect.gen(function*() {
        const bulk = yield* OutboxBulk.OutboxBulk
        yield* Effect.andThen(withKey("typo", "a"), killAll("typo"))
        const refused = yield* Effect.flip(Stream.runCollect(bulk.discardMatching({ topics: ["typo"] } as never)))
        expect(refused).toMatchObject({ _tag: "InvalidInput", argument: "filter.topics" })
        const sql = yield* SqlClient.SqlClient
        const [left] = yield* sql<
          { n: number }
        >`SELECT count(*)::int AS n FROM durable.outbox_messages WHERE topic = 'typo'`
        expect(left!.n).toBe(1)
      }))
  })
})
