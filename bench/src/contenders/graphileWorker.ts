// graphile-worker: jobs added with its own API (addJobs in bulk, addJob per transaction),
// worked by its runner with a no-op task.
import { Logger, makeWorkerUtils, run, type Runner, type WorkerUtils } from "graphile-worker"
import pg from "pg"
import {
  BULK_TRANSACTION,
  forEachConcurrent,
  produceSteadily,
  type QueueContender,
  sleep,
  until,
  untilNoneOpen
} from "../common.js"

const silent = new Logger(() => () => {})

/**
 * Our own pool, ended by us: the bench drops the database afterwards, and an idle client of
 * a pool nobody listens to would crash the process with an unhandled 'error'.
 */
const makePool = (url: string, max: number) => {
  const pool = new pg.Pool({ connectionString: url, max })
  pool.on("error", () => undefined)
  pool.on("connect", (client) => client.on("error", () => undefined))
  return pool
}

const withUtils = async <A>(url: string, use: (utils: WorkerUtils) => Promise<A>, poolSize = 10) => {
  const pool = makePool(url, poolSize)
  const utils = await makeWorkerUtils({ pgPool: pool, logger: silent })
  try {
    await utils.migrate()
    return await use(utils)
  } finally {
    await utils.release()
    await pool.end()
  }
}

/** A runner with a no-op task on our own pool. */
const withRunner = async <A>(
  url: string,
  worker: Record<string, unknown>,
  task: (payload: unknown) => void,
  use: (runner: Runner) => Promise<A>
) => {
  const pool = makePool(url, (worker.maxPoolSize as number | undefined) ?? 10)
  const runner = await run({
    noHandleSignals: true,
    logger: silent,
    pgPool: pool,
    taskList: { bench: async (payload: unknown) => task(payload) },
    preset: { worker }
  } as never)
  try {
    return await use(runner)
  } finally {
    await runner.stop()
    await pool.end()
  }
}

export const make = (label: string, worker: Record<string, unknown>): QueueContender => ({
  name: `graphile-worker (${label})`,
  library: "graphile-worker",
  settings: worker,
  enqueueBulk: (url, messages) =>
    withUtils(url, async (utils) => {
      for (let start = 0; start < messages.length; start += BULK_TRANSACTION) {
        await utils.addJobs(
          messages.slice(start, start + BULK_TRANSACTION).map((payload) => ({ identifier: "bench", payload }))
        )
      }
    }),
  // A named queue runs its jobs one at a time, in order: graphile-worker's per-key order.
  enqueueKeyed: (url, messages, keyOf) =>
    withUtils(url, async (utils) => {
      for (let start = 0; start < messages.length; start += BULK_TRANSACTION) {
        await utils.addJobs(
          messages.slice(start, start + BULK_TRANSACTION).map((payload, j) => {
            const key = keyOf(start + j)
            return { identifier: "bench", payload, ...(key === null ? {} : { queueName: key }) }
          })
        )
      }
    }),
  enqueueEach: (url, messages, producers) =>
    withUtils(
      url,
      (utils) => forEachConcurrent(messages, producers, (payload) => utils.addJob("bench", payload)),
      producers
    ),
  drain: async (url, count) => {
    let delivered = 0
    await withRunner(url, worker, () => void delivered++, async () => {
      await until(() => delivered >= count)
      await untilNoneOpen(url, "SELECT count(*) AS n FROM graphile_worker._private_jobs")
    })
  },
  steady: (url, count, rate) =>
    withUtils(url, async (utils) => {
      const received = new Map<number, number>()
      const task = (payload: unknown) => {
        const i = (payload as { i: number }).i
        if (!received.has(i)) received.set(i, performance.now())
      }
      return withRunner(url, worker, task, async () => {
        await sleep(500) // the listener connects
        const committed = await produceSteadily(count, rate, (i) => utils.addJob("bench", { i }).then(() => undefined))
        await until(() => received.size >= count, 10)
        return { committed, received }
      })
    })
})

/** Its documented fastest settings, and its defaults. */
export const fastest = make("fastest", {
  concurrentJobs: 24,
  maxPoolSize: 25,
  localQueue: { size: 500 },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0
})
export const defaults = make("defaults", {})
