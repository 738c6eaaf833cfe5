// Cancellation: a state of its own; waiting messages never delivered, a claimed one's holder
// fenced out (its mark and release refused), its key moving on; counted apart from dead
// letters, restored with fresh attempts; typed refusals. (The projector's side, a delivery
// interrupted where it runs: packages/projector/test/Cancellation.test.ts.)
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as Inbox from "../src/Inbox.js"
import * as InboxAdmin from "../src/InboxAdmin.js"
import * as InboxWorker from "../src/InboxWorker.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxSearch from "../src/OutboxSearch.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { substrate } from "./support.js"

const stateOf = (id: string) =>
  Effect.flatMap(
    OutboxSearch.OutboxSearch,
    (search) => Effect.map(search.message(id), (found) => found._tag === "Some" ? found.value.state : "gone")
  )

describe("cancellation", () => {
  it.layer(substrate(), { timeout: "2 minutes", excludeTestServices: true })((it) => {
    it.effect("waiting messages: never claimed, counted as cancelled (not dead), their key moves on; restore brings them back", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const admin = yield* OutboxAdmin.OutboxAdmin
        const worker = yield* OutboxWorker.OutboxWorker
        const [head, next, delayed] = yield* outbox.enqueueMany([
          { topic: "cx.wait", payload: 1, options: { orderingKey: "c-1" } },
          { topic: "cx.wait", payload: 2, options: { orderingKey: "c-1" } },
          { topic: "cx.wait", payload: 3, options: { delay: "1 hour" } }
        ])
        const done = yield* admin.cancel([head!, delayed!, "999999999"], { reason: "customer left", by: "ops" })
        expect(done).toEqual({ cancelled: [head, delayed], interrupted: [] })
        expect(yield* stateOf(head!)).toBe("cancelled")
        // The key's next message is not held back by its cancelled head.
        const claimed = yield* worker.claim({ worker: "w", topics: ["cx.wait"], limit: 10, lease: "1 minute" })
        expect(claimed.map((m) => m.id)).toEqual([next])
        const stats = (yield* admin.stats).find((s) => s.topic === "cx.wait")!
        expect(stats).toMatchObject({ cancelled: 2, dead: 0, claimed: 1 })
        expect((yield* admin.deadLetters({ topic: "cx.wait", limit: 10 })).items).toEqual([])
        // Redrive is for dead letters: a cancelled message is not one. Restore is.
        expect(yield* admin.redrive([head!])).toEqual([])
        expect(yield* admin.restore([head!, next!])).toEqual([head])
        const again = yield* worker.claim({ worker: "w", topics: ["cx.wait"], limit: 10, lease: "1 minute" })
        expect(again.map((m) => [m.id, m.attempt])).toEqual([[head, 1]])
        const search = yield* OutboxSearch.OutboxSearch
        const cancelledNow = yield* search.count({ topic: "cx.wait", state: "cancelled" })
        expect(cancelledNow.count).toBe(1)
        const row = yield* search.message(delayed!)
        expect(row._tag === "Some" && row.value.lastError).toBe("cancelled by ops: customer left")
        expect(yield* admin.discard([delayed!])).toEqual([delayed])
      }))

    it.effect("a claimed message: cancelled at once, reported as being delivered; its holder's mark and release are refused", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const admin = yield* OutboxAdmin.OutboxAdmin
        const worker = yield* OutboxWorker.OutboxWorker
        const id = yield* outbox.enqueue("cx.live", { v: 1 })
        const [held] = yield* worker.claim({ worker: "w", topics: ["cx.live"], limit: 1, lease: "1 minute" })
        expect(yield* admin.cancel([id])).toEqual({ cancelled: [id], interrupted: [id] })
        const marked = yield* worker.markProjectedMany([held!.claim])
        expect(marked.completed).toEqual([])
        // Each refusal says why: the holder is to stop, not only to skip its write.
        expect(marked.rejected).toMatchObject([{ _tag: "ClaimMismatch", messageId: id, cancelled: true }])
        expect((yield* worker.renewLeases([held!.claim], "1 minute")).rejected).toMatchObject([{ cancelled: true }])
        const released = yield* Effect.flip(worker.release(held!.claim, { error: "x", retryDelay: Duration.zero }))
        expect(released).toMatchObject({ _tag: "ClaimMismatch", cancelled: true })
        expect(released.message).toMatch(/it was cancelled$/)
        expect(yield* stateOf(id)).toBe("cancelled")
        // Done is done: cancelling a projected message changes nothing.
        const other = yield* outbox.enqueue("cx.live", { v: 2 })
        const [claim] = yield* worker.claim({ worker: "w", topics: ["cx.live"], limit: 1, lease: "1 minute" })
        yield* worker.markProjectedMany([claim!.claim])
        expect(yield* admin.cancel([other])).toEqual({ cancelled: [], interrupted: [] })
      }))

    it.effect("the inbox's stored entries cancel too: never processed, a processing worker fenced out", () =>
      Effect.gen(function*() {
        const inbox = yield* Inbox.Inbox
        const admin = yield* InboxAdmin.InboxAdmin
        const worker = yield* InboxWorker.InboxWorker
        yield* inbox.receive("cx-consumer", "m-1", { v: 1 })
        yield* inbox.receive("cx-consumer", "m-2", { v: 2 })
        const [entry] = yield* worker.claim({ consumer: "cx-consumer", worker: "w", limit: 1, lease: "1 minute" })
        const sql = yield* SqlClient.SqlClient
        const ids =
          (yield* sql<{ id: string }>`SELECT id::text FROM durable.inbox WHERE consumer = 'cx-consumer' ORDER BY id`)
            .map((r) => r.id)
        expect(yield* admin.cancel(ids)).toEqual({ cancelled: ids, interrupted: [entry!.id] })
        expect((yield* worker.completeMany([entry!.claim])).completed).toEqual([])
        expect(yield* worker.claim({ consumer: "cx-consumer", worker: "w", limit: 10, lease: "1 minute" })).toEqual([])
        expect((yield* admin.stats).find((s) => s.consumer === "cx-consumer")).toMatchObject({ cancelled: 2 })
      }))

    it.effect("bad input is a typed refusal naming the rule; nothing changes", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const admin = yield* OutboxAdmin.OutboxAdmin
        const id = yield* outbox.enqueue("cx.bad", { v: 1 })
        expect(yield* Effect.flip(admin.cancel(["not-an-id"]))).toMatchObject({
          _tag: "InvalidInput",
          argument: "ids[0]"
        })
        expect(yield* Effect.flip(admin.cancel([id], { reason: "x".repeat(600) }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "reason"
        })
        expect(yield* Effect.flip(admin.cancel([id], { by: "a\u0000b" }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "by"
        })
        expect(yield* stateOf(id)).toBe("ready")
      }))
  })
})
