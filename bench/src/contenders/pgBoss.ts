// pg-boss: jobs inserted with its own API (insert in bulk, send per transaction), worked by
// `work` with a no-op batch handler.
import { PgBoss } from "pg-boss"
import {
  BULK_TRANSACTION,
  CALL_MILLIS,
  forEachConcurrent,
  produceSteadily,
  type QueueContender,
  sleep,
  until,
  untilNoneOpen
} from "../common.js"

const QUEUE = "bench"

interface Settings {
  /** Pool size. */
  readonly max: number
  readonly work: {
    readonly batchSize: number
    readonly localConcurrency: number
    readonly pollingIntervalSeconds: number
    readonly burstWhenBatchFull: boolean
  }
  /** LISTEN/NOTIFY wake-ups (instance `useListenNotify` and queue `notify`). */
  readonly notify: boolean
  /** How long each call of the handler takes in `drain` (default: nothing, a no-op handler). */
  readonly millisPerCall?: number
}

const withBoss = async <A>(url: string, settings: Settings, use: (boss: PgBoss) => Promise<A>, max = settings.max) => {
  const boss = new PgBoss({
    connectionString: url,
    max,
    useListenNotify: settings.notify,
    // The bench measures queueing, not pg-boss's cron and maintenance loops.
    schedule: false,
    supervise: false
  })
  boss.on("error", () => undefined)
  await boss.start()
  try {
    await boss.createQueue(QUEUE, { notify: settings.notify })
    return await use(boss)
  } finally {
    await boss.stop({ graceful: false, close: true })
  }
}

const OPEN = "SELECT count(*) AS n FROM pgboss.job WHERE state IN ('created', 'retry', 'active')"

export const make = (label: string, settings: Settings): QueueContender => ({
  name: `pg-boss (${label})`,
  library: "pg-boss",
  settings: { ...settings },
  enqueueBulk: (url, messages) =>
    withBoss(url, settings, async (boss) => {
      for (let start = 0; start < messages.length; start += BULK_TRANSACTION) {
        await boss.insert(QUEUE, messages.slice(start, start + BULK_TRANSACTION).map((data) => ({ data })))
      }
    }),
  enqueueEach: (url, messages, producers) =>
    withBoss(
      url,
      settings,
      (boss) => forEachConcurrent(messages, producers, (data) => boss.send(QUEUE, data)),
      producers
    ),
  drain: (url, count) =>
    withBoss(url, settings, async (boss) => {
      let delivered = 0
      await boss.work(QUEUE, settings.work, async (jobs) => {
        if (settings.millisPerCall !== undefined) await sleep(settings.millisPerCall)
        delivered += jobs.length
      })
      await until(() => delivered >= count)
      await untilNoneOpen(url, OPEN)
    }),
  steady: (url, count, rate) =>
    withBoss(url, settings, async (boss) => {
      const received = new Map<number, number>()
      await boss.work<{ i: number }>(QUEUE, settings.work, async (jobs) => {
        const now = performance.now()
        for (const job of jobs) if (!received.has(job.data.i)) received.set(job.data.i, now)
      })
      await sleep(500) // the listener connects
      const committed = await produceSteadily(count, rate, (i) => boss.send(QUEUE, { i }).then(() => undefined))
      await until(() => received.size >= count, 10)
      return { committed, received }
    })
})

/**
 * pg-boss 12 for throughput: batches fetched and completed together (1,000 at a time; 100
 * drained at half the rate here), a few local workers, continuous fetching while batches
 * come back full, LISTEN/NOTIFY for wake-ups and its shortest polling interval.
 */
export const tuned = make("tuned", {
  max: 10,
  work: { batchSize: 1000, localConcurrency: 4, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
  notify: true
})

/** The batch scenario's peer: pg-boss's own batches of 100 (`work`'s `batchSize`), each call taking `CALL_MILLIS`. */
export const batchOf100 = make(`${CALL_MILLIS} ms per call, batch 100`, {
  max: 10,
  work: { batchSize: 100, localConcurrency: 16, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
  notify: true,
  millisPerCall: CALL_MILLIS
})
