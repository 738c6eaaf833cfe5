// What every contender and scenario shares: the payload, the contract a queue contender
// implements, and small statistics.
import pg from "pg"

/** A 200-byte JSON object, the same for every contender. */
export const PAYLOAD = { orderId: 0, customer: "customer-000000", sku: "SKU-0000", note: "x".repeat(132) }
export type Payload = typeof PAYLOAD

export const payloads = (count: number): Array<Payload> =>
  Array.from({ length: count }, (_, i) => ({ ...PAYLOAD, orderId: i }))

/** Messages per transaction in the bulk-enqueue scenario (and the drain's seeding). */
export const BULK_TRANSACTION = 1_000

export interface QueueContender {
  /** Unique; the drain worker process looks the contender up by it. */
  readonly name: string
  /** The library, for scenarios measured once per library (enqueue). */
  readonly library: string
  readonly settings: Record<string, unknown>
  /** Writes `messages` as ready messages, `BULK_TRANSACTION` per transaction, with the library's own bulk API. */
  readonly enqueueBulk: (url: string, messages: ReadonlyArray<Payload>) => Promise<void>
  /** One message per committed transaction, `producers` concurrent producers. */
  readonly enqueueEach?: (url: string, messages: ReadonlyArray<Payload>, producers: number) => Promise<void>
  /**
   * Writes `messages` with `keyOf(i)` as message i's ordering key (null: none), in bulk, with
   * the library's own per-key order (effect-durable's ordering key, graphile-worker's named
   * queue): the keys scenario.
   */
  readonly enqueueKeyed?: (
    url: string,
    messages: ReadonlyArray<Payload>,
    keyOf: (i: number) => string | null
  ) => Promise<void>
  /** Delivers every ready message to a no-op handler; returns when no open row remains. */
  readonly drain: (url: string, count: number) => Promise<void>
  /** `count` messages enqueued one per transaction at `rate`/s, each one's commit and arrival at a handler. */
  readonly steady?: (url: string, count: number, rate: number) => Promise<Timeline>
}

/** A steady load's messages: when message i's transaction committed, when it first reached a handler (`performance.now()`). */
export interface Timeline {
  readonly committed: ReadonlyArray<number>
  readonly received: ReadonlyMap<number, number>
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Resolves once `done()` holds, checking every `every` ms. */
export const until = async (done: () => boolean | Promise<boolean>, every = 5) => {
  while (!(await done())) await sleep(every)
}

/** Resolves once `query` (a count of open rows) answers 0 on `url`. */
export const untilNoneOpen = async (url: string, query: string) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await until(async () => Number((await client.query(query)).rows[0].n) === 0, 10)
  } finally {
    await client.end()
  }
}

/** Runs `task` over `items` with at most `concurrency` in flight. */
export const forEachConcurrent = async <A>(
  items: ReadonlyArray<A>,
  concurrency: number,
  task: (item: A) => Promise<unknown>
) => {
  let next = 0
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < items.length) await task(items[next++]!)
  }))
}

/**
 * Steady-rate producer for the latency scenario: `send(i)` resolves after the i-th
 * message's transaction committed; returns the commit time of each message.
 */
export const produceSteadily = async (count: number, rate: number, send: (i: number) => Promise<void>) => {
  const committed: Array<number> = []
  const start = performance.now()
  for (let i = 0; i < count; i++) {
    await send(i)
    committed[i] = performance.now()
    const wait = start + ((i + 1) * 1000) / rate - performance.now()
    if (wait > 0) await sleep(wait)
  }
  return committed
}

/**
 * Sorted latencies: a handler can start before the commit's reply reaches the producer,
 * such a message counts as 0 ms, never negative.
 */
export const latencies = ({ committed, received }: Timeline, from = 0, to = committed.length) =>
  committed.slice(from, to).map((at, i) => Math.max(0, received.get(from + i)! - at)).sort((a, b) => a - b)

export const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!

export const median = (values: ReadonlyArray<number>) => percentile([...values].sort((a, b) => a - b), 0.5)

export const log = (line: string) => process.stdout.write(`${line}\n`)

export const formatRate = (rate: number) => Math.round(rate).toLocaleString("en")

/** The batch scenario's handler cost: every call takes this long (an API round trip), whatever it carries. */
export const CALL_MILLIS = 5
