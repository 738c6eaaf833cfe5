import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import * as Stream from "effect/Stream"
import { DurableSettings } from "../src/DurableConfig.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxBulk from "../src/OutboxBulk.js"
import * as OutboxSearch from "../src/OutboxSearch.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import * as Retention from "../src/Retention.js"
import { eventually, substrate } from "./support.js"

const Live = Layer.merge(OutboxSearch.layer, OutboxBulk.layer).pipe(Layer.provideMerge(substrate()))

const outboxTable = Effect.map(DurableSettings, (settings) => settings.table("outbox"))
const historyTable = Effect.map(DurableSettings, (settings) => settings.table("outbox_history"))
const messagesView = Effect.map(DurableSettings, (settings) => settings.table("outbox_messages"))

/** Enqueues messages on a fresh topic and returns the topic and their ids, oldest first. */
const seed = (messages: ReadonlyArray<{ payload: unknown; orderingKey?: string; headers?: Record<string, string> }>) =>
  Effect.gen(function*() {
    const outbox = yield* Outbox.Outbox
    const topic = TestSubstrate.freshName("search")
    const ids = yield* outbox.enqueueMany(messages.map((m) => ({
      topic,
      payload: m.payload,
      options: {
        ...(m.orderingKey === undefined ? {} : { orderingKey: m.orderingKey }),
        ...(m.headers === undefined ? {} : { headers: m.headers })
      }
    })))
    return { topic, ids }
  })

/** Claims every message of the topic and releases each as a permanent failure with `error(id)`. */
const kill = (topic: string, error: (id: string) => string) =>
  Effect.gen(function*() {
    const worker = yield* OutboxWorker.OutboxWorker
    const claimed = yield* worker.claim({ worker: "w", topics: [topic], limit: 1000, lease: "1 minute" })
    for (const message of claimed) {
      yield* worker.release(message.claim, { error: error(message.id), retryDelay: 0, permanent: true })
    }
    return claimed.map((m) => m.id)
  })

const stateOf = (ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql<{ id: string; dead: boolean; attempts: number }>`
      SELECT id::text, dead_at IS NOT NULL AS dead, attempt_count AS attempts
        FROM ${sql.literal(yield* messagesView)} WHERE id = ANY(${ids}::bigint[]) ORDER BY id`
  })

describe("OutboxSearch", () => {
  it.layer(Live, { timeout: "60 seconds" })((it) => {
    it.effect("filters by topic, ordering key, state, attempts and values inside payload and headers", () =>
      Effect.gen(function*() {
        const search = yield* OutboxSearch.OutboxSearch
        const { ids, topic } = yield* seed([
          { payload: { customer: { id: 42 }, kind: "a" }, orderingKey: "k1", headers: { tenant: "acme" } },
          { payload: { customer: { id: "42" }, kind: "b" }, headers: { tenant: "globex" } },
          { payload: { customer: { id: 7 }, kind: "a" }, orderingKey: "k1" }
        ])
        const list = (filter: OutboxSearch.MessageFilter) =>
          Effect.map(search.messages({ topic, ...filter }, { limit: 10 }), (page) => page.items.map((m) => m.id))
        expect(yield* list({})).toEqual([...ids].reverse())
        expect(yield* list({ orderingKey: "k1" })).toEqual([ids[2], ids[0]])
        // The number 42 and the string "42" both read as "42".
        expect(yield* list({ payload: [{ path: ["customer", "id"], value: "42" }] })).toEqual([ids[1], ids[0]])
        expect(yield* list({ payload: [{ path: ["customer", "id"], value: "42" }, { path: ["kind"], value: "a" }] }))
          .toEqual([ids[0]])
        expect(yield* list({ headers: [{ path: ["tenant"], value: "globex" }] })).toEqual([ids[1]])
        expect(yield* list({ ids: [ids[0]!, ids[2]!] })).toEqual([ids[2], ids[0]])
        expect(yield* list({ state: "ready" })).toHaveLength(3)
        expect(yield* list({ state: "dead" })).toEqual([])
        expect(yield* list({ minAttempts: 1 })).toEqual([])
        const first = yield* search.messages({ topic }, { limit: 2 })
        expect(first.next).toBe(ids[1])
        const second = yield* search.messages({ topic }, { limit: 2, before: first.next! })
        expect(second).toEqual({
          items: [expect.objectContaining({ id: ids[0], state: "ready", attempts: 0 })],
          next: undefined
        })
        expect(yield* search.count({ topic, orderingKey: "k1" })).toEqual({ count: 2, maxId: ids[2] })
      }))

    it.effect("a message in full: payload, headers, lease holder and generation, the whole last error", () =>
      Effect.gen(function*() {
        const search = yield* OutboxSearch.OutboxSearch
        const { ids, topic } = yield* seed([{ payload: { n: 1 }, headers: { tenant: "acme" } }])
        yield* kill(topic, () => "boom ".repeat(100))
        const detail = Option.getOrThrow(yield* search.message(ids[0]!))
        expect(detail).toMatchObject({
          id: ids[0],
          topic,
          state: "dead",
          attempts: 1,
          failures: 1,
          payload: { n: 1 },
          claimedBy: "w",
          claimGeneration: "1",
          lastError: `${"boom ".repeat(100)} (dead: a permanent failure)`
        })
        expect(detail.headers.tenant).toBe("acme")
        expect(detail.deadAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/)
        expect(yield* search.message("999999999")).toEqual(Option.none())
        expect(yield* Effect.flip(search.message("1; DROP TABLE x"))).toMatchObject({
          _tag: "InvalidInput",
          argument: "id"
        })
      }))

    it.effect("each failed delivery's error is kept, the last 10, oldest first, with its attempt, worker and time", () =>
      Effect.gen(function*() {
        const search = yield* OutboxSearch.OutboxSearch
        const worker = yield* OutboxWorker.OutboxWorker
        const sql = yield* SqlClient.SqlClient
        const { ids, topic } = yield* seed([{ payload: { n: 1 } }])
        yield* sql`UPDATE ${sql.literal(yield* outboxTable)} SET max_attempts = 20 WHERE id = ${ids[0]!}`
        const before = Option.getOrThrow(yield* search.message(ids[0]!))
        expect(before.failureHistory).toEqual([])
        for (let i = 1; i <= 12; i++) {
          const [message] = yield* worker.claim({ worker: `w${i}`, topics: [topic], limit: 1, lease: "1 minute" })
          const error = i === 12 ? "x".repeat(600) : `failure ${i}`
          yield* worker.release(message!.claim, { error, retryDelay: 0 })
        }
        const detail = Option.getOrThrow(yield* search.message(ids[0]!))
        expect(detail).toMatchObject({ attempts: 12, failures: 12, state: "ready" })
        expect(detail.failureHistory.map((f) => [f.attempt, f.worker, f.error])).toEqual([
          ...Array.from({ length: 9 }, (_, k) => [k + 3, `w${k + 3}`, `failure ${k + 3}`]),
          [12, "w12", "x".repeat(500)]
        ])
        expect(detail.failureHistory.every((f) => /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/.test(f.at))).toBe(true)
        // A delivery that succeeds adds nothing.
        const [last] = yield* worker.claim({ worker: "w13", topics: [topic], limit: 1, lease: "1 minute" })
        yield* worker.markProjected(last!.claim)
        expect(Option.getOrThrow(yield* search.message(ids[0]!)).failureHistory).toHaveLength(10)
      }))

    it.effect("dead letters are grouped by topic and error, digits folded: one bad deploy is one row", () =>
      Effect.gen(function*() {
        const search = yield* OutboxSearch.OutboxSearch
        const { ids, topic } = yield* seed([{ payload: 1 }, { payload: 2 }, { payload: 3 }, { payload: 4 }])
        yield* kill(topic, (id) => (id === ids[3] ? "timeout after 30s" : `order ${id} not found`))
        const groups = yield* search.deadLetterGroups({ topic, limit: 10 })
        expect(groups).toEqual([
          expect.objectContaining({
            topic,
            error: "order # not found (dead: a permanent failure)",
            count: 3,
            latestId: ids[2],
            example: `order ${ids[2]} not found (dead: a permanent failure)`
          }),
          expect.objectContaining({
            topic,
            error: "timeout after #s (dead: a permanent failure)",
            count: 1,
            latestId: ids[3]
          })
        ])
        // The group is a filter: what it counts is what a bulk action takes.
        expect((yield* search.count({ topic, error: groups[0]!.error })).count).toBe(3)
      }))

    it.effect("redrive of everything matching goes in bounded batches, each committed, up to the confirmed id", () =>
      Effect.gen(function*() {
        const search = yield* OutboxSearch.OutboxSearch
        const bulk = yield* OutboxBulk.OutboxBulk
        const { ids, topic } = yield* seed(Array.from({ length: 7 }, (_, n) => ({ payload: { n } })))
        yield* kill(topic, () => "bad")
        const { maxId } = yield* search.count({ topic, state: "dead" })
        // A message that dies after the operator confirmed is left alone.
        const late = yield* seed([{ payload: "late" }])
        yield* Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* sql`UPDATE ${sql.literal(yield* outboxTable)} SET topic = ${topic} WHERE id = ${late.ids[0]!}::bigint`
        })
        yield* kill(topic, () => "bad")
        const progress = Array.from(
          yield* Stream.runCollect(
            bulk.redriveMatching({ topic }, {
              batchSize: 3,
              statementTimeout: "5 seconds",
              ...(maxId === null ? {} : { upTo: maxId })
            })
          )
        )
        expect(progress.map((p) => [p.ids.length, p.total])).toEqual([[3, 3], [3, 6], [1, 7]])
        expect((yield* stateOf(ids)).every((row) => !row.dead && row.attempts === 0)).toBe(true)
        expect((yield* stateOf(late.ids))[0]!.dead).toBe(true)
      }))

    it.effect("a bulk action held to the confirmed count acts on at most that many, oldest first, each once", () =>
      Effect.gen(function*() {
        const search = yield* OutboxSearch.OutboxSearch
        const bulk = yield* OutboxBulk.OutboxBulk
        const { ids, topic } = yield* seed(Array.from({ length: 5 }, (_, n) => ({ payload: { n } })))
        yield* kill(topic, () => "bad")
        const { count, maxId } = yield* search.count({ topic, state: "dead" })
        expect(count).toBe(5)
        // The operator confirmed 3 (a count shown earlier): 3 are redriven, in two batches, the oldest.
        const held = Array.from(
          yield* Stream.runCollect(bulk.redriveMatching({ topic }, { batchSize: 2, limit: 3, upTo: maxId! }))
        )
        expect(held.map((p) => [p.ids.length, p.total])).toEqual([[2, 2], [1, 3]])
        expect(held.flatMap((p) => p.ids)).toEqual(ids.slice(0, 3))
        expect((yield* stateOf(ids)).map((row) => row.dead)).toEqual([false, false, false, true, true])
        // A limit of 0 touches nothing; a limit beyond the matches takes what there is.
        expect(Array.from(yield* Stream.runCollect(bulk.discardMatching({ topic }, { limit: 0 })))).toEqual([])
        const rest = Array.from(
          yield* Stream.runCollect(bulk.discardMatching({ topic }, { limit: 100, batchSize: 10 }))
        )
        expect(rest.flatMap((p) => p.ids)).toEqual(ids.slice(3))
        expect(yield* Effect.flip(Stream.runDrain(bulk.discardMatching({ topic }, { limit: -1 })))).toMatchObject({
          _tag: "InvalidInput",
          argument: "options.limit"
        })
      }))

    it.effect("discard of everything matching deletes only dead messages of the filter; an interrupted one leaves whole batches", () =>
      Effect.gen(function*() {
        const bulk = yield* OutboxBulk.OutboxBulk
        const { ids, topic } = yield* seed(
          Array.from({ length: 6 }, (_, n) => ({ payload: { n, tenant: n % 2 === 0 ? "acme" : "globex" } }))
        )
        yield* kill(topic, () => "bad")
        const alive = yield* seed([{ payload: { tenant: "acme" } }])
        const filter = { payload: [{ path: ["tenant"], value: "acme" }] }
        const taken = yield* Stream.runCollect(bulk.discardMatching({ topic, ...filter }, { batchSize: 2 }))
        expect(Array.from(taken).flatMap((p) => p.ids)).toEqual([ids[0], ids[2], ids[4]])
        expect((yield* stateOf(ids)).map((r) => r.id)).toEqual([ids[1], ids[3], ids[5]])
        expect(yield* stateOf(alive.ids)).toHaveLength(1)
        // Stopped after its first batch: that batch is gone, the rest untouched.
        const fiber = yield* Stream.runForEach(
          bulk.discardMatching({ topic }, { batchSize: 1 }),
          () => Effect.never
        ).pipe(Effect.forkChild)
        yield* eventually(stateOf(ids), (rows) => rows.length === 2)
        yield* Fiber.interrupt(fiber)
        expect((yield* stateOf(ids)).map((r) => r.id)).toEqual([ids[3], ids[5]])
      }))

    it.effect("history buckets deliveries, deaths and the longest lag over the window", () =>
      Effect.gen(function*() {
        const search = yield* OutboxSearch.OutboxSearch
        const worker = yield* OutboxWorker.OutboxWorker
        const { topic } = yield* seed([{ payload: 1 }, { payload: 2 }, { payload: 3 }])
        const claimed = yield* worker.claim({ worker: "w", topics: [topic], limit: 2, lease: "1 minute" })
        yield* worker.markProjectedMany(claimed.map((m) => m.claim))
        yield* kill(topic, () => "bad")
        const buckets = yield* search.history({ topic, window: "10 minutes", buckets: 10 })
        expect(buckets).toHaveLength(10)
        const last = buckets[9]!
        expect(last).toMatchObject({ delivered: 2, died: 1 })
        expect(last.maxLagSeconds).toBeGreaterThanOrEqual(0)
        expect(buckets.slice(0, 9)).toEqual(
          buckets.slice(0, 9).map((b) => ({ ...b, delivered: 0, died: 0, maxLagSeconds: null }))
        )
        expect(Date.parse(buckets[0]!.at)).toBeLessThan(Date.parse(last.at))
      }))

    it.effect("bad filters are typed errors naming the field, before any SQL", () =>
      Effect.gen(function*() {
        const search = yield* OutboxSearch.OutboxSearch
        expect(yield* Effect.flip(search.count({ state: "gone" as never }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "filter.state"
        })
        expect(yield* Effect.flip(search.count({ ids: ["0"] }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "filter.ids[0]"
        })
        // Past PostgreSQL's bigint: bad input, not a database error.
        for (const id of ["9223372036854775808", "9999999999999999999"]) {
          expect(yield* Effect.flip(search.count({ ids: [id] }))).toMatchObject({
            _tag: "InvalidInput",
            argument: "filter.ids[0]"
          })
          expect(yield* Effect.flip(search.message(id))).toMatchObject({ _tag: "InvalidInput", argument: "id" })
          expect(yield* Effect.flip(search.messages({}, { limit: 1, before: id }))).toMatchObject({
            _tag: "InvalidInput"
          })
          const admin = yield* OutboxAdmin.OutboxAdmin
          expect(yield* Effect.flip(admin.redrive([id]))).toMatchObject({ _tag: "InvalidInput", argument: "ids[0]" })
        }
        expect(Option.isNone(yield* search.message("9223372036854775807"))).toBe(true)
        expect(yield* Effect.flip(search.count({ topic: "a\u0000" }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "filter.topic"
        })
        expect(yield* Effect.flip(search.count({ olderThan: "-1 days" }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "filter.olderThan"
        })
        expect(yield* Effect.flip(search.count({ payload: [{ path: [], value: "x" }] }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "filter.payload[0].path"
        })
        const stream = (yield* OutboxBulk.OutboxBulk).redriveMatching({}, { batchSize: 0 })
        expect(yield* Effect.flip(Stream.runDrain(stream))).toMatchObject({
          _tag: "InvalidInput",
          argument: "options.batchSize"
        })
      }))
  })
})

describe("Retention", () => {
  it.layer(substrate(), { timeout: "60 seconds" })((it) => {
    it.effect("counts what a purge would delete, with the purges' own floors", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const worker = yield* OutboxWorker.OutboxWorker
        const { topic } = yield* seed([{ payload: 1 }, { payload: 2 }])
        const claimed = yield* worker.claim({ worker: "w", topics: [topic], limit: 10, lease: "1 minute" })
        yield* worker.markProjectedMany(claimed.map((m) => m.claim))
        yield* sql`UPDATE ${sql.literal(yield* historyTable)} SET projected_at = now() - interval '2 days' WHERE id = ${
          claimed[0]!.id
        }::bigint`
        yield* sql`UPDATE ${
          sql.literal(yield* historyTable)
        } SET projected_at = now() - interval '2 hours' WHERE id = ${claimed[1]!.id}::bigint`
        expect(yield* Retention.purgeable("outbox", "1 day")).toBe(1)
        expect(yield* Retention.purgeable("outbox", "1 hour")).toBe(2)
        expect(yield* Retention.purgeable("ledger", "1 day")).toBe(0)
        expect(yield* Retention.purgeable("inbox", "1 day")).toBe(0)
        expect(yield* Effect.flip(Retention.purgeable("outbox", "1 second"))).toMatchObject({
          _tag: "InvalidInput",
          argument: "olderThan"
        })
        expect(yield* Effect.flip(Retention.purgeable("ledger", "30 minutes"))).toMatchObject({
          _tag: "InvalidInput",
          argument: "olderThan"
        })
      }))
  })
})
