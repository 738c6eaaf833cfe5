// Priority with a bound on waiting (migration 21): a message's wait (`maxWait`) and its due
// time (when it becomes ready, plus the wait). The claim takes the earliest due first, in a
// limited topic's groups too; a key's order is never overtaken; the bound holds on the
// database's clock; a property test holds the claim to the rule over random messages, limits
// and keys; rows written before version 21 go first; typed refusals; the in-memory outbox
// orders alike.
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import * as FastCheck from "fast-check"
import * as FlowControl from "../src/FlowControl.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxMemory from "../src/OutboxMemory.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { markAll, nodesOfPlan, projectByHand, substrate } from "./support.js"

/** Keyed messages of `topic` due before an earlier open message of their key. */
const inversions = (topic: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    // Each open keyed message due before the one right before it in its key (one scan of the
    // topic: a self-join, planned on the statistics a 100,000-row test left, took 56 s).
    sql<{ n: number }>`
      SELECT count(*)::int AS n FROM (
        SELECT o.due_at, lag(o.due_at) OVER (PARTITION BY o.ordering_key ORDER BY o.id) AS before
          FROM durable.outbox o
         WHERE o.topic = ${topic} AND o.ordering_key IS NOT NULL AND o.projected_at IS NULL AND o.dead_at IS NULL) r
       WHERE r.due_at < r.before`.pipe(Effect.map(([row]) => row!.n)))

const claimIn = (topics: ReadonlyArray<string>, limit: number, perKey = 1) =>
  Effect.flatMap(
    OutboxWorker.OutboxWorker,
    (w) => w.claim({ worker: "w", limit, lease: "1 minute", topics, perKey })
  )

/** Claims one message at a time, marking each, until none is left: their payloads' names in claim order. */
const drainOneByOne = (topic: string) =>
  Effect.gen(function*() {
    const order: Array<string> = []
    while (true) {
      const [message] = yield* claimIn([topic], 1)
      if (message === undefined) return order
      order.push((message.payload as { name: string }).name)
      yield* markAll([message])
    }
  })

describe("Outbox priority: due order with a bound on waiting", () => {
  it.layer(substrate(), { timeout: "3 minutes", excludeTestServices: true })((it) => {
    it.effect("the earliest due time goes first: no wait, then a minute's, then an hour's, whatever the enqueue order", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = "waits.order"
        const waits = { bulk: "1 hour", normal: "1 minute", urgent: undefined } as const
        for (let i = 0; i < 3; i++) {
          for (const kind of ["bulk", "normal", "urgent"] as const) {
            const maxWait = waits[kind]
            yield* outbox.enqueue(topic, { name: `${kind}${i}` }, maxWait === undefined ? {} : { maxWait })
          }
        }
        expect(yield* drainOneByOne(topic)).toEqual([
          "urgent0",
          "urgent1",
          "urgent2",
          "normal0",
          "normal1",
          "normal2",
          "bulk0",
          "bulk1",
          "bulk2"
        ])
      }))

    it.effect("the bound: a message is passed over by those that became ready within its wait, never by a later one", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const topic = "waits.bound"
        // One transaction, one now(): "within" became ready inside the bulk message's wait,
        // however slow the machine.
        const bulk = yield* sql.withTransaction(Effect.gen(function*() {
          const id = yield* outbox.enqueue(topic, { name: "bulk" }, { maxWait: "1 second" })
          yield* outbox.enqueue(topic, { name: "within" })
          return id
        }))
        // Once the database's clock is past the bulk message's due time, a newcomer goes after it.
        yield* sql<{ past: boolean }>`
          SELECT now() > due_at AS past FROM durable.outbox WHERE id = ${bulk}::bigint`.pipe(
          Effect.flatMap(([row]) => row!.past ? Effect.void : Effect.fail("not yet")),
          Effect.retry(Schedule.spaced("50 millis"))
        )
        yield* outbox.enqueue(topic, { name: "later" })
        expect(yield* drainOneByOne(topic)).toEqual(["within", "bulk", "later"])
      }))

    it.effect("behind a 100,000-message campaign with an hour's wait, a claim reads one index entry to find the urgent message", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const topic = "waits.campaign"
        yield* sql`INSERT INTO durable.outbox (topic, payload, due_at)
                   SELECT ${topic}, jsonb_build_object('i', i), now() + interval '1 hour' FROM generate_series(1, 100000) i`
        yield* sql`ANALYZE durable.outbox`
        const urgent = yield* outbox.enqueue(topic, { name: "urgent" })
        const admin = yield* OutboxAdmin.OutboxAdmin
        const explained = yield* admin.explainClaim({ worker: "w", limit: 1, lease: "1 minute", topics: [topic] }, {
          analyze: true
        })
        const scans = nodesOfPlan(explained).filter((node) => node["Index Name"] === "outbox_open_due_idx")
        expect(scans.length).toBeGreaterThan(0)
        // Read in due order: the urgent message is the first entry; the rest is never read.
        for (const scan of scans) {
          expect((scan["Actual Rows"] ?? 0) + (scan["Rows Removed by Filter"] ?? 0)).toBeLessThanOrEqual(1)
        }
        const [claimed] = yield* claimIn([topic], 1)
        expect(claimed!.id).toBe(urgent)
        yield* markAll([claimed!])
        yield* sql`DELETE FROM durable.outbox WHERE topic = ${topic}`
      }))

    it.effect("a keyed message is never due before its key's messages ahead of it: a thousand keys whose heads were delayed still claim their heads", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const topic = "waits.key-tails"
        // Per key, a head delayed a second, then one without delay: due as they come, the second
        // would come first, and a thousand of them would fill the claim's window for keyed heads.
        yield* outbox.enqueueMany(
          Array.from({ length: 1000 }, (_, i) => [
            { topic, payload: { i, n: 0 }, options: { orderingKey: `tail.${i}`, delay: Duration.seconds(1) } },
            { topic, payload: { i, n: 1 }, options: { orderingKey: `tail.${i}` } }
          ]).flat()
        )
        // And one by one: a stored head with an hour's wait, then one without.
        yield* outbox.enqueue(topic, { i: -1, n: 0 }, { orderingKey: "tail.single", maxWait: "1 hour" })
        yield* outbox.enqueue(topic, { i: -1, n: 1 }, { orderingKey: "tail.single" })
        expect(yield* inversions(topic)).toBe(0)
        yield* sql`SELECT pg_sleep(greatest(0, extract(epoch FROM max(available_at) - now()))) FROM durable.outbox
                    WHERE topic = ${topic} AND ordering_key <> 'tail.single'`
        const claimed = yield* claimIn([topic], 100)
        expect(claimed).toHaveLength(100)
        expect(claimed.every((m) => (m.payload as { n: number }).n === 0)).toBe(true)
        yield* markAll(claimed)
        yield* projectByHand(`q.topic = '${topic}'`)
      }))

    it.effect("heads behind a window full of later messages due before them (what the enqueue cannot prevent) are reached within a few claims", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const topic = "waits.inverted"
        yield* outbox.enqueueMany(
          Array.from({ length: 1000 }, (_, i) => [
            { topic, payload: { i, n: 0 }, options: { orderingKey: `inv.${i}` } },
            { topic, payload: { i, n: 1 }, options: { orderingKey: `inv.${i}` } }
          ]).flat()
        )
        // What a race of two enqueues of one key, a redrive keeping its old due time or a process
        // of the previous release can leave: each key's second message due before its head.
        yield* sql`UPDATE durable.outbox SET due_at = due_at - interval '1 hour'
                    WHERE topic = ${topic} AND (payload ->> 'n')::int = 1`
        expect(yield* inversions(topic)).toBe(1000)
        // The window holds none of the heads; one claim in 16 looks past it (the chance that 400
        // claims in a row do not: (15/16)^400, about 6e-12).
        let heads: ReadonlyArray<OutboxWorker.OutboxMessage> = []
        for (let claims = 0; claims < 400 && heads.length === 0; claims++) heads = yield* claimIn([topic], 100)
        expect(heads).toHaveLength(100)
        expect(heads.every((m) => (m.payload as { n: number }).n === 0)).toBe(true)
        yield* markAll(heads)
        yield* projectByHand(`q.topic = '${topic}'`)
      }))

    it.effect("a key's order is never overtaken: an urgent message waits behind its key's earlier bulk one", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = "waits.keys"
        yield* outbox.enqueue(topic, { name: "k-bulk" }, { orderingKey: "k", maxWait: "1 hour" })
        yield* outbox.enqueue(topic, { name: "k-urgent" }, { orderingKey: "k" })
        yield* outbox.enqueue(topic, { name: "plain" })
        yield* outbox.enqueue(topic, { name: "j-normal" }, { orderingKey: "j", maxWait: "1 minute" })
        expect(yield* drainOneByOne(topic)).toEqual(["plain", "j-normal", "k-bulk", "k-urgent"])
        // With runs: the bulk head takes its key's next message along, in the key's order.
        yield* outbox.enqueue(topic, { name: "k2-bulk" }, { orderingKey: "k2", maxWait: "1 hour" })
        yield* outbox.enqueue(topic, { name: "k2-urgent" }, { orderingKey: "k2" })
        const run = yield* claimIn([topic], 10, 5)
        expect(run.map((m) => (m.payload as { name: string }).name)).toEqual(["k2-bulk", "k2-urgent"])
        yield* markAll(run)
      }))

    it.effect("enqueueMany and a replacing dedup key carry the wait; an extending one moves the due time; a retried message keeps its place", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const topic = "waits.many"
        yield* outbox.enqueueMany([
          { topic, payload: { name: "bulk" }, options: { maxWait: "1 hour" } },
          { topic, payload: { name: "urgent" } }
        ])
        yield* outbox.enqueue(topic, { name: "d" }, { dedupKey: "d", maxWait: "1 hour" })
        yield* outbox.enqueue(topic, { name: "d-now" }, { dedupKey: "d", dedupMode: "replace" })
        expect(yield* drainOneByOne(topic)).toEqual(["urgent", "d-now", "bulk"])
        // Extended: the delay grows by ten minutes, the due time with it (the wait is kept).
        const sql = yield* SqlClient.SqlClient
        const e = yield* outbox.enqueue(topic, { name: "e" }, { dedupKey: "e", maxWait: "1 minute" })
        yield* outbox.enqueue(topic, { name: "e2" }, { dedupKey: "e", dedupMode: "extend", delay: "10 minutes" })
        const [extended] = yield* sql<{ wait: number; delay: number }>`
          SELECT extract(epoch FROM due_at - available_at)::float8 AS wait,
                 extract(epoch FROM available_at - created_at)::float8 AS delay
            FROM durable.outbox WHERE id = ${e}::bigint`
        expect(extended!.wait).toBeCloseTo(60, 0)
        expect(extended!.delay).toBeCloseTo(600, 0)
        yield* projectByHand(`q.id = ${e}`)
        // Extended while ready, with no delay: it has waited, and it keeps its due time.
        const f = yield* outbox.enqueue(topic, { name: "f" }, { dedupKey: "f", maxWait: "1 minute" })
        yield* sql`UPDATE durable.outbox SET available_at = available_at - interval '10 minutes',
                          due_at = due_at - interval '10 minutes' WHERE id = ${f}::bigint`
        const dueOf = (id: string) =>
          Effect.map(
            sql<{ due: string }>`SELECT due_at::text AS due FROM durable.outbox WHERE id = ${id}::bigint`,
            ([row]) => row!.due
          )
        const before = yield* dueOf(f)
        yield* outbox.enqueue(topic, { name: "f2" }, { dedupKey: "f", dedupMode: "extend" })
        expect(yield* dueOf(f)).toBe(before)
        yield* projectByHand(`q.id = ${f}`)
        // A retry keeps its due time (its place): released with a delay, only its readiness moves.
        const retried = yield* outbox.enqueue(topic, { name: "retried" }, { maxWait: "1 minute" })
        const due = yield* dueOf(retried)
        const [first] = yield* claimIn([topic], 1)
        yield* worker.release(first!.claim, { error: "later", retryDelay: "10 seconds" })
        expect(yield* dueOf(retried)).toBe(due)
        yield* projectByHand(`q.id = ${retried}`)
      }))

    it.effect("a limited topic's group offers its messages in due order; a claim over it and a free topic takes from both", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const flow = yield* FlowControl.FlowControl
        yield* flow.setLimit("waits.limited", { maxInFlight: 2 })
        yield* outbox.enqueue("waits.limited", { name: "g-bulk" }, { group: "g", maxWait: "1 hour" })
        yield* outbox.enqueue("waits.limited", { name: "g-urgent" }, { group: "g" })
        const [first] = yield* claimIn(["waits.limited"], 1)
        expect((first!.payload as { name: string }).name).toBe("g-urgent")
        yield* markAll([first!])
        const [second] = yield* claimIn(["waits.limited"], 1)
        expect((second!.payload as { name: string }).name).toBe("g-bulk")
        yield* markAll([second!])
        for (let i = 0; i < 4; i++) yield* outbox.enqueue("waits.limited", { name: `l${i}` })
        yield* outbox.enqueue("waits.free", { name: "bulk" }, { maxWait: "1 hour" })
        yield* outbox.enqueue("waits.free", { name: "urgent" })
        const claimed = yield* claimIn(["waits.limited", "waits.free"], 3)
        expect(claimed.map((m) => (m.payload as { name: string }).name).sort()).toEqual(["l0", "l1", "urgent"])
        yield* markAll(claimed)
        yield* flow.clear("waits.limited")
      }))

    it.effect("eight claims at once over messages with and without waits: each message is taken exactly once, each key in order", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = "waits.concurrent"
        const waits = [undefined, "1 second", "1 minute", "1 hour"] as const
        yield* outbox.enqueueMany(Array.from({ length: 400 }, (_, i) => {
          const maxWait = waits[i % waits.length]
          return {
            topic,
            payload: { i },
            options: {
              ...(maxWait === undefined ? {} : { maxWait }),
              ...(i % 3 === 0 ? { orderingKey: `k${i % 7}` } : {})
            }
          }
        }))
        const taken: Array<number> = []
        const claimer = Effect.gen(function*() {
          while (true) {
            const claimed = yield* claimIn([topic], 7, 3)
            if (claimed.length === 0) return
            for (const m of claimed) taken.push((m.payload as { i: number }).i)
            yield* markAll(claimed)
          }
        })
        yield* Effect.all(Array.from({ length: 8 }, () => claimer), { concurrency: "unbounded" })
        expect(taken).toHaveLength(400)
        expect(new Set(taken).size).toBe(400)
        // A key's messages were taken in enqueue order (each claim's run in order, runs one after another).
        for (let k = 0; k < 7; k++) {
          const ofKey = taken.filter((i) => i % 3 === 0 && i % 7 === k)
          expect(ofKey).toEqual([...ofKey].sort((a, b) => a - b))
        }
      }))

    it.effect("bad waits are typed refusals naming maxWait, and write nothing", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const topic = "waits.bad"
        // Numbers are milliseconds (effect's Duration.millis(NaN) is already zero: NaN is given raw).
        const bad: ReadonlyArray<unknown> = [-1, Number.NaN, Duration.millis(-1), "31 days", "soon", Duration.infinity]
        for (const maxWait of bad) {
          expect(yield* Effect.flip(outbox.enqueue(topic, {}, { maxWait: maxWait as Duration.Input }))).toMatchObject({
            _tag: "InvalidInput",
            argument: "maxWait"
          })
          expect(
            yield* Effect.flip(
              outbox.enqueueMany([{ topic, payload: {}, options: { maxWait: maxWait as Duration.Input } }])
            )
          ).toMatchObject({ _tag: "InvalidInput", argument: "maxWait" })
        }
        expect(yield* sql`SELECT 1 FROM durable.outbox_messages WHERE topic = ${topic}`).toHaveLength(0)
        // A zero wait is no wait: due when ready.
        const id = yield* outbox.enqueue(topic, {}, { maxWait: "0 seconds", delay: "1 second" })
        const [row] = yield* sql<
          { same: boolean }
        >`SELECT due_at = available_at AS same FROM durable.outbox WHERE id = ${id}::bigint`
        expect(row!.same).toBe(true)
      }))

    it.effect(
      "property: every claim takes, of the ready key heads, the earliest due times (ties by id)",
      () =>
        Effect.gen(function*() {
          const services = yield* Effect.context<SqlClient.SqlClient | Outbox.Outbox | OutboxWorker.OutboxWorker>()
          let round = 0
          yield* Effect.promise(() =>
            FastCheck.assert(
              FastCheck.asyncProperty(
                FastCheck.record({
                  messages: FastCheck.array(
                    FastCheck.record({
                      wait: FastCheck.constantFrom(0, 0, 1, 2, 60, 3600),
                      key: FastCheck.constantFrom(null, null, "a", "b")
                    }),
                    { minLength: 1, maxLength: 30 }
                  ),
                  limits: FastCheck.array(FastCheck.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 10 })
                }),
                ({ limits, messages }) =>
                  Effect.runPromise(Effect.provideContext(
                    Effect.gen(function*() {
                      const sql = yield* SqlClient.SqlClient
                      const outbox = yield* Outbox.Outbox
                      const topic = `waits.property.${++round}`
                      for (const m of messages) {
                        yield* outbox.enqueue(topic, {}, {
                          ...(m.wait === 0 ? {} : { maxWait: Duration.seconds(m.wait) }),
                          ...(m.key === null ? {} : { orderingKey: `${round}.${m.key}` })
                        })
                      }
                      for (let i = 0;; i++) {
                        const open = yield* sql<
                          { id: string; key: string | null; due: string }
                        >`SELECT id::text, ordering_key AS key,
                               (extract(epoch FROM due_at) * 1000000)::bigint::text AS due
                          FROM durable.outbox o WHERE topic = ${topic} AND projected_at IS NULL ORDER BY o.id`
                        if (open.length === 0) return
                        const limit = limits[i % limits.length]!
                        const claimed = yield* claimIn([topic], limit)
                        expect(claimed.map((m) => m.id).sort(), JSON.stringify({ limit, open })).toEqual(
                          expectedClaim(open, limit).sort()
                        )
                        yield* markAll(claimed)
                      }
                    }),
                    services
                  ))
              ),
              { numRuns: 40 }
            )
          )
        }),
      180_000
    )
  })
})

/**
 * The rule, written apart from the SQL: of each key its first open message only (in id
 * order: `open` is), the earliest due first, ties by id, cut to the limit.
 */
const expectedClaim = (
  open: ReadonlyArray<{ id: string; key: string | null; due: string }>,
  limit: number
): Array<string> => {
  const heads = open.filter((row) => row.key === null || open.find((o) => o.key === row.key) === row)
  const byDue = (a: typeof open[number], b: typeof open[number]) =>
    BigInt(a.due) < BigInt(b.due) ? -1 : BigInt(a.due) > BigInt(b.due) ? 1 : Number(BigInt(a.id) - BigInt(b.id))
  return heads.sort(byDue).slice(0, limit).map((row) => row.id)
}

describe("Outbox priority in memory", () => {
  it.effect("the in-memory outbox orders by due time on its clock, as the claim does", () =>
    Effect.gen(function*() {
      const outbox = yield* Outbox.Outbox
      const worker = yield* OutboxWorker.OutboxWorker
      yield* outbox.enqueue("m", { name: "bulk" }, { maxWait: "10 seconds" })
      yield* outbox.enqueue("m", { name: "urgent" })
      yield* TestClock.adjust("11 seconds")
      yield* outbox.enqueue("m", { name: "later" })
      const names: Array<string> = []
      for (let i = 0; i < 3; i++) {
        const [message] = yield* worker.claim({ worker: "w", limit: 1, lease: "1 minute" })
        names.push((message!.payload as { name: string }).name)
        yield* worker.markProjected(message!.claim)
      }
      expect(names).toEqual(["urgent", "bulk", "later"])
    }).pipe(Effect.provide(OutboxMemory.layer())))
})
