import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Reactivity from "effect/reactivity/Reactivity"
import * as Result from "effect/Result"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import { DurableSettings, layerSettings } from "../src/DurableConfig.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { barrier, eventually, substrate } from "./support.js"

interface Row {
  readonly id: string
  readonly topic: string
  readonly ordering_key: string | null
  readonly payload: unknown
  readonly headers: Record<string, string>
  readonly claimed_by: string | null
  readonly claim_generation: string
  readonly attempt_count: number
  readonly max_attempts: number
  readonly projected: boolean
  readonly dead: boolean
  readonly last_error: string | null
  readonly lease_seconds: number | null
  readonly delay_seconds: number
}

// These suites exercise the producer, worker and operator sides of the outbox together.
const outboxServices = Effect.map(
  Effect.all([Outbox.Outbox, OutboxWorker.OutboxWorker, OutboxAdmin.OutboxAdmin]),
  ([producer, worker, admin]) => ({ ...producer, ...worker, ...admin })
)

const table = Effect.map(DurableSettings, (settings) => settings.table("outbox"))
/** Every message, wherever it is: open, dead or delivered. */
const messages = Effect.map(DurableSettings, (settings) => settings.table("outbox_messages"))

const rowsOf = (ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql<Row>`
      SELECT id::text, topic, ordering_key, payload, headers, claimed_by, claim_generation::text, attempt_count,
             max_attempts, projected_at IS NOT NULL AS projected, dead_at IS NOT NULL AS dead, last_error,
             extract(epoch FROM claimed_until - now())::float8 AS lease_seconds,
             extract(epoch FROM available_at - created_at)::float8 AS delay_seconds
        FROM ${sql.literal(yield* messages)} o WHERE o.id = ANY(${ids}::bigint[]) ORDER BY o.id`
  })
const rowOf = (id: string) => Effect.map(rowsOf([id]), (rows) => rows[0])

// Each test works on its own topics so that claims never see another test's messages.
const freshTopic = TestSubstrate.freshName

const claimAll = (worker: string, topic: string, lease: Duration.Input = "30 seconds") =>
  Effect.flatMap(OutboxWorker.OutboxWorker, (outbox) => outbox.claim({ worker, topics: [topic], limit: 100, lease }))

const suite = (schema: string) => {
  const Live = substrate({ schema, lockTimeout: "5 seconds" }, {}, { maxAttemptsByTopic: { fragile: 2 } })

  it.layer(Live, { timeout: "60 seconds" })((it) => {
    it.effect("enqueue writes in the caller's transaction: a rollback leaves no row, a commit one with its headers", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* outboxServices
        const topic = freshTopic()
        let rolledBackId = ""
        const failed = sql.withTransaction(Effect.gen(function*() {
          rolledBackId = yield* outbox.enqueue(topic, { n: 1 })
          return yield* Effect.fail("business rule broken" as const)
        }))
        expect(yield* Effect.flip(failed)).toBe("business rule broken")
        expect(yield* rowsOf([rolledBackId])).toEqual([])
        const id = yield* sql.withTransaction(
          outbox.enqueue(topic, { n: 2, nested: { ok: true } }, { orderingKey: "order-9", headers: { tenant: "acme" } })
        ).pipe(Effect.withSpan("business-operation"))
        const row = (yield* rowOf(id))!
        expect(row).toMatchObject({
          topic,
          ordering_key: "order-9",
          payload: { n: 2, nested: { ok: true } },
          attempt_count: 0
        })
        expect(row.headers.tenant).toBe("acme")
        expect(row.headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/)
        expect(row.delay_seconds).toBe(0)
      }))

    it.effect("the wake-up notification is delivered at commit and never for a rolled-back enqueue", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const database = yield* TestDatabase.TestDatabase
        // A transaction pooler cannot carry a LISTEN: behind one, listen on a direct client.
        const pg = TestDatabase.isPooled(database)
          ? yield* PgClient.make({ url: database.url, maxConnections: 1 }).pipe(
            Effect.provide([Reactivity.layer, TestDatabase.liveClock])
          )
          : yield* PgClient.PgClient
        const outbox = yield* outboxServices
        const topic = freshTopic("notify")
        // listen resolves once the server has the listener; notifications arrive in commit order.
        const heard = yield* pg.listen(outbox.channel)
        yield* Effect.flip(sql.withTransaction(Effect.andThen(outbox.enqueue(topic, {}), Effect.fail("rollback"))))
        yield* sql.withTransaction(outbox.enqueue(topic, {}))
        // A sentinel committed last: everything sent before it has been heard when it is.
        const sentinel = `${topic}-sentinel`
        yield* sql`SELECT pg_notify(${outbox.channel}, ${sentinel})`
        const payloads: Array<string> = []
        while (payloads.at(-1) !== sentinel) {
          const notification = yield* Queue.take(heard).pipe(Effect.timeout("10 seconds"), TestClock.withLive)
          if (notification.payload === topic || notification.payload === sentinel) payloads.push(notification.payload)
        }
        // One wake-up for the committed enqueue, none for the rolled-back one.
        expect(payloads).toEqual([topic, sentinel])
      }))

    it.effect("a payload that is not JSON, too large, or a bad topic fails typed and writes nothing", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const sql = yield* SqlClient.SqlClient
        const topic = freshTopic()
        const notJson = yield* Effect.flip(outbox.enqueue(topic, { at: new Date(), n: 1n }))
        expect(notJson).toMatchObject({ _tag: "UnsupportedJsonValue" })
        const big = yield* Effect.flip(outbox.enqueue(topic, { blob: "x".repeat(256 * 1024) }))
        expect(big).toMatchObject({ _tag: "PayloadTooLarge", topic, limit: 256 * 1024 })
        const manyWithOneBad = yield* Effect.flip(outbox.enqueueMany([
          { topic, payload: { ok: 1 } },
          { topic, payload: { blob: "y".repeat(300 * 1024) } }
        ]))
        expect(manyWithOneBad._tag).toBe("PayloadTooLarge")
        expect(yield* Effect.flip(outbox.enqueue("", {}))).toMatchObject({ _tag: "InvalidInput", argument: "topic" })
        expect(yield* Effect.flip(outbox.enqueue(topic, {}, { orderingKey: "k\u0000" }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "orderingKey"
        })
        expect(yield* Effect.flip(outbox.enqueue(topic, {}, { delay: -1 }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "delay"
        })
        const rows = yield* sql`SELECT 1 FROM ${sql.literal(yield* messages)} WHERE topic = ${topic}`
        expect(rows).toEqual([])
      }))

    it.effect("enqueueMany writes every message in one statement and returns ids in input order", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const ids = yield* outbox.enqueueMany(
          Array.from(
            { length: 50 },
            (_, i) => ({ topic, payload: { i }, options: { orderingKey: i % 2 === 0 ? "even" : "odd" } })
          )
        )
        expect(ids).toHaveLength(50)
        const rows = yield* rowsOf(ids)
        expect(rows.map((r) => r.id)).toEqual(ids)
        expect(rows.map((r) => (r.payload as { i: number }).i)).toEqual(Array.from({ length: 50 }, (_, i) => i))
        expect(rows[1]!.ordering_key).toBe("odd")
      }))

    it.effect("a delay is counted on the database clock; the message is claimable only after it", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const later = yield* outbox.enqueue(topic, { later: true }, { delay: "1 hour" })
        const soon = yield* outbox.enqueue(topic, { soon: true }, { delay: "400 millis" })
        expect((yield* rowOf(later))!.delay_seconds).toBe(3600)
        expect((yield* rowOf(soon))!.delay_seconds).toBeCloseTo(0.4, 6)
        expect(yield* claimAll("w1", topic)).toEqual([])
        const claimed = yield* eventually(claimAll("w1", topic), (messages) => messages.length > 0)
        expect(claimed.map((m) => m.id)).toEqual([soon])
      }))

    it.effect("claim leases ready messages in id order, bumps generation and attempt, and filters by topic", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const other = freshTopic()
        const ids = yield* outbox.enqueueMany([1, 2, 3].map((i) => ({ topic, payload: { i } })))
        const otherId = yield* outbox.enqueue(other, {})
        const first = yield* outbox.claim({ worker: "w1", topics: [topic], limit: 2, lease: "30 seconds" })
        expect(first.map((m) => m.id)).toEqual(ids.slice(0, 2))
        expect(first[0]).toMatchObject({
          topic,
          payload: { i: 1 },
          attempt: 1,
          claim: { messageId: ids[0], worker: "w1", generation: 1 }
        })
        const rest = yield* outbox.claim({ worker: "w2", topics: [topic, other], limit: 10, lease: "30 seconds" })
        expect(rest.map((m) => m.id)).toEqual([ids[2], otherId])
        const rows = yield* rowsOf([...ids, otherId])
        expect(rows.map((r) => r.claimed_by)).toEqual(["w1", "w1", "w2", "w2"])
        expect(rows.every((r) => r.claim_generation === "1" && r.attempt_count === 1)).toBe(true)
        expect(rows.every((r) => r.lease_seconds! > 29 && r.lease_seconds! <= 30)).toBe(true)
        expect(yield* outbox.claim({ worker: "w3", topics: [topic, other], limit: 10, lease: "30 seconds" })).toEqual(
          []
        )
      }))

    it.effect("messages of one ordering key are handed out one at a time in id order; other keys are not held back", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic("keyed")
        const [a1, a2, a3, b1, free] = yield* outbox.enqueueMany([
          { topic, payload: "a1", options: { orderingKey: "a" } },
          { topic, payload: "a2", options: { orderingKey: "a" } },
          { topic, payload: "a3", options: { orderingKey: "a" } },
          { topic, payload: "b1", options: { orderingKey: "b" } },
          { topic, payload: "free" }
        ])
        const first = yield* claimAll("w1", topic)
        expect(first.map((m) => m.id)).toEqual([a1, b1, free])
        // A second worker gets nothing of key a while a1 is open, even though a2 is unlocked.
        expect(yield* claimAll("w2", topic)).toEqual([])
        const [m1] = first
        // A retry keeps the key blocked: a2 must not overtake a1.
        yield* outbox.release(m1!.claim, { error: "retry later", retryDelay: "1 hour" })
        expect(yield* claimAll("w2", topic)).toEqual([])
        const sql = yield* SqlClient.SqlClient
        yield* sql`UPDATE ${sql.literal(yield* table)} SET available_at = now() WHERE id = ${a1!}`
        const [again] = yield* claimAll("w2", topic)
        expect(again!.id).toBe(a1)
        yield* outbox.markProjected(again!.claim)
        const [next] = yield* claimAll("w2", topic)
        expect(next!.id).toBe(a2)
        // A dead message does not hold its key forever.
        yield* outbox.release(next!.claim, { error: "poison", retryDelay: 0, permanent: true })
        expect((yield* claimAll("w2", topic)).map((m) => m.id)).toEqual([a3])
      }))

    it.effect("a row locked by another open transaction is skipped, not waited for", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const [held, free] = yield* outbox.enqueueMany([{ topic, payload: 1 }, { topic, payload: 2 }])
        const locked = yield* Deferred.make<void>()
        const done = yield* Deferred.make<void>()
        const holder = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT id FROM ${sql.literal(yield* table)} WHERE id = ${held!} FOR UPDATE`
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(done)
        })))
        yield* Deferred.await(locked)
        const claimed = yield* claimAll("w1", topic)
        expect(claimed.map((m) => m.id)).toEqual([free])
        yield* Deferred.succeed(done, undefined)
        yield* Fiber.join(holder)
        expect((yield* claimAll("w1", topic)).map((m) => m.id)).toEqual([held])
      }))

    it.effect("markProjected is fenced by worker and generation, idempotent, and typed for stale or missing tokens", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const id = yield* outbox.enqueue(topic, {})
        const [message] = yield* claimAll("w1", topic)
        const claim = message!.claim
        const foreign = yield* Effect.flip(outbox.markProjected({ ...claim, worker: "w2" }))
        expect(foreign).toMatchObject({ _tag: "ClaimMismatch", messageId: id, worker: "w2" })
        const generationZero = yield* Effect.flip(outbox.markProjected({ ...claim, generation: 0 }))
        expect(generationZero._tag).toBe("ClaimMismatch")
        expect((yield* rowOf(id))!.projected).toBe(false)
        yield* outbox.markProjected(claim)
        yield* outbox.markProjected(claim)
        expect((yield* rowOf(id))!.projected).toBe(true)
        expect((yield* Effect.flip(outbox.markProjected({ ...claim, generation: 2 })))._tag).toBe("ClaimMismatch")
        const missing = yield* Effect.flip(
          outbox.markProjected({ messageId: "999999999", worker: "w1", generation: 1 })
        )
        expect(missing).toMatchObject({ _tag: "MessageMissing", messageId: "999999999" })
        const malformed = yield* Effect.flip(
          outbox.markProjected({ messageId: "1; DROP TABLE x", worker: "w1", generation: 1 })
        )
        expect(malformed._tag).toBe("ClaimMismatch")
      }))

    it.effect("markProjectedMany marks the valid claims in one statement and reports the stale and missing", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic()
        yield* outbox.enqueueMany([1, 2, 3, 4].map((i) => ({ topic, payload: i })))
        const claimed = yield* claimAll("w1", topic)
        const [a, b, c, d] = claimed.map((m) => m.claim)
        yield* outbox.markProjected(d!)
        const result = yield* outbox.markProjectedMany([
          a!,
          b!,
          { ...c!, generation: 7 },
          d!,
          { messageId: "999999998", worker: "w1", generation: 1 }
        ])
        expect([...result.completed].sort()).toEqual([a!.messageId, b!.messageId, d!.messageId].sort())
        expect(result.rejected.map((e) => e._tag).sort()).toEqual(["ClaimMismatch", "MessageMissing"])
        const rows = yield* rowsOf(claimed.map((m) => m.id))
        expect(rows.map((r) => r.projected)).toEqual([true, true, false, true])
      }))

    it.effect("release records the error and makes the message claimable only after the retry delay", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const id = yield* outbox.enqueue(topic, {})
        const [message] = yield* claimAll("w1", topic)
        const released = yield* outbox.release(message!.claim, {
          error: "broker unavailable",
          retryDelay: "400 millis"
        })
        expect(released).toEqual({ dead: false })
        const row = (yield* rowOf(id))!
        expect(row).toMatchObject({ last_error: "broker unavailable", dead: false, projected: false, attempt_count: 1 })
        expect(row.lease_seconds).toBeNull()
        expect(yield* claimAll("w2", topic)).toEqual([])
        const again = yield* eventually(claimAll("w2", topic), (messages) => messages.length > 0)
        expect(again[0]).toMatchObject({ id, attempt: 2, claim: { worker: "w2", generation: 2 } })
        // The released token settles nothing any more.
        expect((yield* Effect.flip(outbox.markProjected(message!.claim)))._tag).toBe("ClaimMismatch")
      }))

    it.effect("release stores any error text: NUL replaced, a long one cut at 4,096 characters saying how long it was", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const [long, nul] = [yield* outbox.enqueue(topic, {}), yield* outbox.enqueue(topic, {})]
        const claimed = yield* claimAll("w1", topic)
        const byId = new Map(claimed.map((m) => [m.id, m.claim]))
        // 100,000 characters, then a pair that must not be split at the cut.
        expect(
          yield* outbox.release(byId.get(long)!, { error: "E".repeat(100_000) + "😀", retryDelay: 0, permanent: true })
        )
          .toEqual({ dead: true })
        yield* outbox.release(byId.get(nul)!, { error: "bad\u0000byte", retryDelay: 0 })
        const stored = (yield* rowOf(long))!.last_error!
        expect(stored.startsWith("E".repeat(4000))).toBe(true)
        expect(stored).toContain("[truncated: 100002 characters]")
        expect(stored.length).toBeLessThanOrEqual(4096 + " (dead: a permanent failure)".length)
        expect((yield* rowOf(nul))!.last_error).toBe("bad\uFFFDbyte")
      }))

    it.effect("renewLease extends a live claim; a stale token cannot renew", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const id = yield* outbox.enqueue(topic, {})
        const [message] = yield* claimAll("w1", topic, "2 seconds")
        yield* outbox.renewLease(message!.claim, "90 seconds")
        expect((yield* rowOf(id))!.lease_seconds).toBeGreaterThan(89)
        expect((yield* Effect.flip(outbox.renewLease({ ...message!.claim, worker: "w9" }, "90 seconds")))._tag).toBe(
          "ClaimMismatch"
        )
      }))

    it.effect("renewLeases extends a batch's live claims in one statement and reports the stale and missing ones", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const ids = yield* outbox.enqueueMany([1, 2, 3].map((i) => ({ topic, payload: i })))
        const claimed = yield* claimAll("w1", topic, "2 seconds")
        const stale = { ...claimed[1]!.claim, generation: 99 }
        const missing = { messageId: "999999998", worker: "w1", generation: 1 }
        const result = yield* outbox.renewLeases([claimed[0]!.claim, stale, claimed[2]!.claim, missing], "90 seconds")
        expect([...result.applied].sort()).toEqual([ids[0], ids[2]].sort())
        expect(result.rejected.map((e) => [e._tag, e.messageId])).toEqual([["ClaimMismatch", ids[1]], [
          "MessageMissing",
          "999999998"
        ]])
        const leases = (yield* rowsOf(ids)).map((row) => row.lease_seconds!)
        expect(leases[0]).toBeGreaterThan(89)
        expect(leases[1]).toBeLessThan(3)
        expect(leases[2]).toBeGreaterThan(89)
      }))

    it.effect("giveBack unclaims at once and counts no failure and no lost lease, last_error kept; unstarted takes back the attempt", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const [id] = yield* outbox.enqueueMany([{ topic, payload: {} }])
        const [first] = yield* claimAll("w1", topic)
        yield* outbox.release(first!.claim, { error: "busy", retryDelay: 0 })
        const [second] = yield* claimAll("w1", topic)
        expect((yield* outbox.giveBack([second!.claim])).applied).toEqual([id])
        const [third] = yield* claimAll("w2", topic)
        // A give-back of a delivery perhaps under way (a shutdown) keeps its attempt.
        expect(third).toMatchObject({ id, attempt: 3 })
        // One never started takes it back: the next delivery is the same attempt.
        expect((yield* outbox.giveBack([third!.claim], { unstarted: true })).applied).toEqual([id])
        const [fourth] = yield* claimAll("w2", topic)
        expect(fourth).toMatchObject({ id, attempt: 3 })
        const counts = yield* sql<{ failure_count: number; lease_expiries: number; last_error: string }>`
          SELECT failure_count, lease_expiries, last_error FROM ${sql.literal(yield* messages)} WHERE id = ${id!}`
        expect(counts).toEqual([{ failure_count: 1, lease_expiries: 0, last_error: "busy" }])
        // A stale token gives back nothing.
        expect((yield* outbox.giveBack([second!.claim])).rejected.map((e) => e._tag)).toEqual(["ClaimMismatch"])
        yield* outbox.markProjected(fourth!.claim)
        expect((yield* rowOf(id!))!).toMatchObject({ projected: true, last_error: null })
      }))

    it.effect("a paused topic is never claimed while others flow; resuming makes it claimable and wakes listeners", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const paused = freshTopic("paused")
        const running = freshTopic("running")
        const [held] = yield* outbox.enqueueMany([{ topic: paused, payload: 1 }, { topic: running, payload: 2 }])
        expect(yield* outbox.pause(paused, { by: "ops@example" })).toBe(true)
        expect(yield* outbox.pause(paused)).toBe(false)
        const claimed = yield* outbox.claim({ worker: "w1", topics: [paused, running], limit: 10, lease: "1 minute" })
        expect(claimed.map((m) => m.topic)).toEqual([running])
        const stats = (yield* outbox.stats).find((s) => s.topic === paused)!
        expect(stats).toMatchObject({ ready: 1, paused: true })
        expect((yield* outbox.paused).find((p) => p.topic === paused)).toMatchObject({ pausedBy: "ops@example" })
        expect(yield* outbox.resume(paused)).toBe(true)
        expect(yield* outbox.resume(paused)).toBe(false)
        expect((yield* claimAll("w1", paused)).map((m) => m.id)).toEqual([held])
        expect(yield* Effect.flip(outbox.pause("\u0000"))).toMatchObject({ _tag: "InvalidInput", argument: "topic" })
      }))

    it.effect("after a lease expires another worker claims the row; the first worker can change nothing", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const id = yield* outbox.enqueue(topic, {})
        const [first] = yield* claimAll("w1", topic, "300 millis")
        const [second] = yield* eventually(claimAll("w2", topic), (messages) => messages.length > 0)
        expect(second).toMatchObject({ id, attempt: 2, claim: { worker: "w2", generation: 2 } })
        for (
          const attempt of [
            outbox.markProjected(first!.claim),
            outbox.release(first!.claim, { error: "late", retryDelay: 0 }),
            outbox.renewLease(first!.claim, "1 minute")
          ]
        ) {
          expect(yield* Effect.flip(attempt)).toMatchObject({ _tag: "ClaimMismatch", worker: "w1", generation: 1 })
        }
        const row = (yield* rowOf(id))!
        expect(row).toMatchObject({ claimed_by: "w2", claim_generation: "2", projected: false, last_error: null })
        yield* outbox.markProjected(second!.claim)
        expect((yield* rowOf(id))!.projected).toBe(true)
      }))

    it.effect("dead letters: after max attempts, at once for a permanent error; listed, redriven, discarded", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        // `fragile` allows 2 attempts (maxAttemptsByTopic); other topics the default 25.
        const fragile = yield* outbox.enqueue("fragile", { n: 1 })
        const topic = freshTopic("poison")
        const poison = yield* outbox.enqueue(topic, { bad: true })
        expect((yield* rowOf(fragile))!.max_attempts).toBe(2)
        expect((yield* rowOf(poison))!.max_attempts).toBe(25)
        const [try1] = yield* claimAll("w1", "fragile")
        expect(yield* outbox.release(try1!.claim, { error: "timeout 1", retryDelay: 0 })).toEqual({ dead: false })
        const [try2] = yield* claimAll("w1", "fragile")
        expect(yield* outbox.release(try2!.claim, { error: "timeout 2", retryDelay: 0 })).toEqual({ dead: true })
        expect(yield* claimAll("w1", "fragile")).toEqual([])
        const [p] = yield* claimAll("w1", topic)
        expect(yield* outbox.release(p!.claim, { error: "schema mismatch", retryDelay: 0, permanent: true })).toEqual({
          dead: true
        })
        expect((yield* rowOf(poison))!).toMatchObject({
          dead: true,
          attempt_count: 1,
          last_error: "schema mismatch (dead: a permanent failure)"
        })

        const page1 = yield* outbox.deadLetters({ limit: 1 })
        const page2 = yield* outbox.deadLetters({ limit: 1, before: page1.next! })
        expect([page1.items[0]!.id, page2.items[0]!.id]).toEqual([poison, fragile])
        expect(page1.items[0]).toMatchObject({
          topic,
          attempts: 1,
          lastError: "schema mismatch (dead: a permanent failure)"
        })
        expect(page1.items[0]!.deadAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/)
        const fragileOnly = yield* outbox.deadLetters({ topic: "fragile", limit: 10 })
        expect(fragileOnly.items.map((d) => [d.id, d.attempts, d.lastError])).toEqual([
          [fragile, 2, "timeout 2 (dead: 2 failed deliveries)"]
        ])
        expect(fragileOnly.next).toBeUndefined()

        expect(yield* outbox.redrive([fragile])).toEqual([fragile])
        expect((yield* rowOf(fragile))!).toMatchObject({ dead: false, attempt_count: 0 })
        expect((yield* claimAll("w1", "fragile")).map((m) => [m.id, m.attempt])).toEqual([[fragile, 1]])
        expect(yield* outbox.discard([poison, fragile])).toEqual([poison])
        expect(yield* rowOf(poison)).toBeUndefined()
      }))

    it.effect("a lost lease is not a failed delivery: after its worker dies on the last allowed failure, the message is handed out again", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* outboxServices
        const id = yield* outbox.enqueue("fragile", { n: 2 })
        const [a] = yield* claimAll("w1", "fragile")
        yield* outbox.release(a!.claim, { error: "first failure", retryDelay: 0 })
        yield* claimAll("w1", "fragile", "300 millis") // its worker "dies" with the lease
        const [again] = yield* eventually(claimAll("w2", "fragile"), (claimed) => claimed.length === 1)
        expect(again).toMatchObject({ id, attempt: 3, claim: { worker: "w2", generation: 3 } })
        expect((yield* rowOf(id))!).toMatchObject({ dead: false, last_error: "first failure" })
        const counts = yield* sql<{ failure_count: number; lease_expiries: number }>`
          SELECT failure_count, lease_expiries FROM ${sql.literal(yield* messages)} WHERE id = ${id}`
        expect(counts).toEqual([{ failure_count: 1, lease_expiries: 1 }])
      }))

    it.effect("a message whose leases run out maxLeaseExpiries times is dead at the next claim, saying why", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic("killer")
        const id = yield* outbox.enqueue(topic, {})
        const claim = (worker: string) =>
          outbox.claim({ worker, topics: [topic], limit: 1, lease: "200 millis", maxLeaseExpiries: 2 })
        yield* claim("w1") // each worker "dies" holding it
        yield* eventually(claim("w2"), (claimed) => claimed.length === 1)
        const last = yield* eventually(
          Effect.andThen(claim("w3"), Effect.map(rowOf(id), (row) => row!)),
          (row) => row.dead
        )
        expect(last).toMatchObject({ dead: true, attempt_count: 2, claim_generation: "2" })
        expect(last.last_error).toBe("dead: its lease ran out 2 times (a worker died or stalled while delivering it)")
      }))

    it.effect("a message that cannot be delivered never blocks the messages behind it", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic()
        const [poison, ...behind] = yield* outbox.enqueueMany([0, 1, 2, 3].map((i) => ({ topic, payload: { i } })))
        const first = yield* outbox.claim({ worker: "w1", topics: [topic], limit: 1, lease: "30 seconds" })
        expect(first.map((m) => m.id)).toEqual([poison])
        yield* outbox.release(first[0]!.claim, { error: "cannot decode", retryDelay: 0, permanent: true })
        const next = yield* claimAll("w1", topic)
        expect(next.map((m) => m.id)).toEqual(behind)
      }))

    it.effect("stats count ready, delayed, claimed, dead and projected per topic; unprojectedCount the open ones", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const topic = freshTopic("stats")
        yield* outbox.enqueueMany([1, 2, 3, 4, 5].map((i) => ({ topic, payload: i })))
        yield* outbox.enqueue(topic, {}, { delay: "1 hour" })
        const [p, d, c] = yield* outbox.claim({ worker: "w1", topics: [topic], limit: 3, lease: "1 minute" })
        yield* outbox.markProjected(p!.claim)
        yield* outbox.release(d!.claim, { error: "x", retryDelay: 0, permanent: true })
        expect(c).toMatchObject({ attempt: 1, claim: { worker: "w1" } })
        const stats = (yield* outbox.stats).find((s) => s.topic === topic)!
        expect(stats).toMatchObject({ topic, ready: 2, delayed: 1, claimed: 1, dead: 1, projected: 1 })
        expect(stats.oldestReadySeconds).toBeGreaterThanOrEqual(0)
        expect(yield* outbox.unprojectedCount(topic)).toBe(4)
      }))

    it.effect("purge deletes projected messages in batches and never one replayed concurrently", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* outboxServices
        const topic = freshTopic("purge")
        const ids = yield* outbox.enqueueMany(Array.from({ length: 40 }, (_, i) => ({ topic, payload: i })))
        const claimed = yield* claimAll("w1", topic)
        yield* outbox.markProjectedMany(claimed.map((m) => m.claim))
        // Delivered two days ago, as far as the history can tell (the row moves to that day's partition).
        const t = sql.literal((yield* DurableSettings).table("outbox_history"))
        yield* sql`UPDATE ${t} SET projected_at = now() - interval '2 days' WHERE id = ANY(${ids}::bigint[])`
        const replayed = ids.filter((_, i) => i % 4 === 0)
        // Purge and replay race from a barrier; each replayed row must survive, however they interleave.
        const gate = yield* barrier
        const [[purged, replayedIds]] = yield* Effect.all([
          Effect.all([
            Effect.andThen(gate.wait, outbox.purge({ olderThan: "1 day", batchSize: 7 })),
            Effect.andThen(gate.wait, outbox.replay(replayed))
          ], { concurrency: "unbounded" }),
          gate.open
        ], { concurrency: "unbounded" })
        const left = yield* rowsOf(ids)
        // Every replayed row either was replayed before purge could take it (and survives,
        // open again) or was purged before the replay (and replay did not return it).
        for (const id of replayed) {
          const row = left.find((r) => r.id === id)
          expect(replayedIds.includes(id)).toBe(row !== undefined)
          if (row !== undefined) expect(row.projected).toBe(false)
        }
        expect(purged + left.length).toBe(40)
        expect(left.every((r) => !r.projected)).toBe(true)
        expect(yield* outbox.purge({ olderThan: "1 day" })).toBe(0)
      }))

    it.effect("a claim blocked past the statement timeout fails retryable and leaves no half-claimed row", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const topic = freshTopic()
        const outbox = yield* outboxServices
        const id = yield* outbox.enqueue(topic, {})
        const settings = yield* DurableSettings
        const strict = OutboxWorker.layer.pipe(
          Layer.provide(layerSettings({ schema: settings.schema, statementTimeout: "200 millis" }))
        )
        const locked = yield* Deferred.make<void>()
        const done = yield* Deferred.make<void>()
        const holder = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
          yield* sql.unsafe(`LOCK TABLE ${settings.table("outbox")} IN ACCESS EXCLUSIVE MODE`)
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(done)
        })))
        yield* Deferred.await(locked)
        const error = yield* Effect.flip(
          Effect.flatMap(
            OutboxWorker.OutboxWorker,
            (o) => o.claim({ worker: "w1", topics: [topic], limit: 10, lease: "1 minute" })
          ).pipe(
            Effect.provide(strict)
          )
        )
        expect(error).toMatchObject({ _tag: "DatabaseError", code: "57014", retryable: true })
        yield* Deferred.succeed(done, undefined)
        yield* Fiber.join(holder)
        expect((yield* rowOf(id))!).toMatchObject({ claimed_by: null, claim_generation: "0", attempt_count: 0 })
      }))

    it.effect("a claim rewrites its rows in place (HOT): no index entry is written for it", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* outboxServices
        const topic = freshTopic()
        // Enough rows to fill many pages: without free room on them no update could be in place.
        yield* outbox.enqueueMany(
          Array.from({ length: 2000 }, (_, i) => ({ topic, payload: { i, pad: "x".repeat(200) } }))
        )
        const hotUpdates = Effect.map(
          sql<
            { n: string }
          >`SELECT pg_stat_clear_snapshot(), pg_stat_get_tuples_hot_updated(${yield* table}::regclass)::text AS n`,
          (rows) => Number(rows[0]!.n)
        )
        const before = yield* hotUpdates
        const claimed = yield* outbox.claim({ worker: "hot", topics: [topic], limit: 100, lease: "1 minute" })
        expect(claimed).toHaveLength(100)
        // Statistics reach the shared counters within a second or so of the claim's commit.
        // (A claimed row grows by its lease columns, so the last rows packed onto a page may
        // find no room until the page is pruned: most, not all, of a first pass is in place.)
        const after = yield* eventually(hotUpdates, (n) => n - before >= 85, 15)
        expect(after - before).toBeGreaterThanOrEqual(85)
      }))

    it.effect("bad claim options are typed errors naming the field", () =>
      Effect.gen(function*() {
        const outbox = yield* outboxServices
        const cases = [
          [{ worker: "", limit: 1, lease: "1 minute" }, "worker"],
          [{ worker: "w", limit: 0, lease: "1 minute" }, "limit"],
          [{ worker: "w", limit: 1001, lease: "1 minute" }, "limit"],
          [{ worker: "w", limit: 1, lease: 0 }, "lease"],
          [{ worker: "w", limit: 1, lease: "soon" as Duration.Input }, "lease"],
          [{ worker: "w", limit: 1, lease: "1 minute", topics: [""] }, "topics[0]"]
        ] as const
        for (const [options, field] of cases) {
          const result = yield* Effect.result(outbox.claim(options))
          expect(Result.isFailure(result) && result.failure).toMatchObject({ _tag: "InvalidInput", argument: field })
        }
      }))
  })
}

// The whole suite runs in the default schema and in a quoted, mixed-case one.
describe("Outbox (schema durable)", () => suite("durable"))
describe("Outbox (schema \"Outbox_Mixed\")", () => suite("Outbox_Mixed"))
