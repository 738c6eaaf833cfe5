// Scenario feed: the commit-ordered feed (`Feed`). What a message's feed position costs its
// enqueue (one message per transaction from concurrent producers, against the same schema with
// the position's default and index taken away, rounds alternating); how fast consumers read the
// same messages (1 consumer, then 8 at once, each reading all of them); and commit → read
// latency for a running consumer while messages commit one per transaction at a steady rate.
import * as Feed from "@effect-durable/pg/Feed"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as SqlClient from "effect/sql/SqlClient"
import { formatRate, latencies, median, type Payload, payloads, percentile, produceSteadily, until } from "../common.js"
import { defaults, enqueueBulk, run as onDurable } from "../contenders/effectDurable.js"
import { alternate, type Bench, progress } from "../harness.js"

export const PRODUCERS = 16
/** Consumers at once over delivered messages, and over messages still waiting for delivery. */
export const CONSUMERS = [1, 8] as const
export const RATE = 200
const BATCH = 1_000

interface Cost {
  readonly with: number
  readonly without: number
  readonly ratio: number
}

export interface FeedResult {
  /** Enqueues a second with the position, without it, and their ratio: one per transaction, and in bulk. */
  readonly enqueue: Cost
  readonly enqueueBulk: Cost
  /** Per consumer count: messages each consumer read a second, and all of them together. */
  readonly read: ReadonlyArray<
    { readonly consumers: number; readonly each: number; readonly total: number; readonly waiting: boolean }
  >
  readonly latency: { readonly p50: number; readonly p99: number; readonly max: number }
}

/** One message per transaction from `PRODUCERS` producers: the enqueue scenario's own. */
const enqueueEach = (url: string, messages: ReadonlyArray<Payload>) => defaults.enqueueEach!(url, messages, PRODUCERS)

/** The same schema without the feed: no position taken at enqueue (the open table has no index of the feed's). */
const WITHOUT_FEED = ["ALTER TABLE durable.outbox ALTER COLUMN feed_position SET DEFAULT 0"]

/** `enqueue`'s rate with the feed position and without it (one per transaction: commits bound it; in bulk: the server's work). */
const enqueueCost = async (
  bench: Bench,
  messages: number,
  how: { readonly label: string; readonly enqueue: (url: string, rows: ReadonlyArray<Payload>) => Promise<unknown> }
): Promise<Cost> => {
  const rows = payloads(messages)
  const variants = [{ name: "with the feed position", strip: false }, { name: "without it", strip: true }]
  const rounds = await alternate(bench, variants, async (variant, round, index) => {
    const database = `bench_feed_enqueue_${index}`
    const url = await bench.freshDatabase(database)
    await onDurable(url, Effect.void)
    if (variant.strip) { for (const statement of WITHOUT_FEED) await bench.execute(url, statement) }
    const started = performance.now()
    await how.enqueue(url, rows)
    const rate = messages / ((performance.now() - started) / 1000)
    await bench.dropDatabase(database)
    progress(round, `${how.label} ${variant.name}`, `${formatRate(rate).padStart(7)} msg/s`)
    return rate
  })
  const [withFeed, without] = [median(rounds[0]!), median(rounds[1]!)]
  return { with: withFeed, without, ratio: withFeed / without }
}

/** `consumers` consumers each read all `messages` at once; the slowest one's time. */
const readAll = (url: string, consumers: number, messages: number) =>
  onDurable(
    url,
    Effect.gen(function*() {
      const feed = yield* Feed.Feed
      const names = Array.from({ length: consumers }, (_, i) => `reader-${consumers}-${i}`)
      for (const name of names) yield* feed.register(name, { topics: ["bench"] })
      const started = performance.now()
      yield* Effect.forEach(names, (name) =>
        Effect.gen(function*() {
          let read = 0
          while (read < messages) read += yield* feed.consume(name, () => Effect.void, { limit: BATCH })
        }), { concurrency: "unbounded", discard: true })
      return (performance.now() - started) / 1000
    }),
    consumers + 2
  )

/** As a projector's marks leave them: every message moved into the history, delivered now. */
const DELIVER_ALL = `WITH m AS (DELETE FROM durable.outbox RETURNING *)
  INSERT INTO durable.outbox_history
  SELECT (jsonb_populate_record(NULL::durable.outbox_history, to_jsonb(m) || jsonb_build_object('projected_at', now()))).*
    FROM m`

const readThroughput = async (bench: Bench, messages: number) => {
  const cases = [
    ...CONSUMERS.map((consumers) => ({ consumers, waiting: false })),
    { consumers: 1, waiting: true }
  ]
  const rounds = await alternate(bench, cases, async ({ consumers, waiting }, round, index) => {
    const database = `bench_feed_read_${index}`
    const url = await bench.freshDatabase(database)
    await enqueueBulk(url, payloads(messages))
    if (!waiting) await bench.execute(url, DELIVER_ALL)
    const seconds = await readAll(url, consumers, messages)
    await bench.dropDatabase(database)
    const each = messages / seconds
    progress(
      round,
      `${consumers} consumer${consumers === 1 ? "" : "s"}, ${waiting ? "waiting" : "delivered"}`,
      `${formatRate(each).padStart(7)} msg/s each`
    )
    return { each, total: each * consumers }
  })
  return cases.map(({ consumers, waiting }, i) => ({
    consumers,
    waiting,
    each: median(rounds[i]!.map((r) => r.each)),
    total: median(rounds[i]!.map((r) => r.total))
  }))
}

const latency = async (bench: Bench, messages: number) => {
  const rounds = await alternate(bench, ["feed"], async (_, round) => {
    const database = "bench_feed_latency"
    const url = await bench.freshDatabase(database)
    const received = new Map<number, number>()
    const committed = await onDurable(
      url,
      Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const runHere = Effect.runPromiseWith(yield* Effect.context<never>())
        yield* feed.register("latency", { topics: ["bench"] })
        const reader = yield* Effect.forkChild(feed.run("latency", (entries) =>
          Effect.sync(() => {
            const now = performance.now()
            for (const entry of entries) received.set((entry.payload as { i: number }).i, now)
          })))
        const committed = yield* Effect.promise(() =>
          produceSteadily(
            messages,
            RATE,
            (i) => runHere(Effect.asVoid(sql.withTransaction(outbox.enqueue("bench", { i }))))
          )
        )
        yield* Effect.promise(() => until(() => received.size >= messages))
        yield* Fiber.interrupt(reader)
        return committed
      })
    )
    await bench.dropDatabase(database)
    const sorted = latencies({ committed, received })
    const result = { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), max: sorted[sorted.length - 1]! }
    progress(round, "commit → read", `p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(2)} ms`)
    return result
  })
  const all = rounds[0]!
  return {
    p50: median(all.map((r) => r.p50)),
    p99: median(all.map((r) => r.p99)),
    max: median(all.map((r) => r.max))
  }
}

export const run = async (
  bench: Bench,
  sizes: { readonly enqueue: number; readonly bulk: number; readonly read: number; readonly latency: number }
): Promise<FeedResult> => ({
  enqueue: await enqueueCost(bench, sizes.enqueue, { label: "enqueue", enqueue: enqueueEach }),
  enqueueBulk: await enqueueCost(bench, sizes.bulk, { label: "bulk", enqueue: enqueueBulk }),
  read: await readThroughput(bench, sizes.read),
  latency: await latency(bench, sizes.latency)
})
