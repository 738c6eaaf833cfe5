// graphile-worker as a bench contender: jobs seeded with its own bulk API, drained by its
// runner with a no-op task until no job row is left.
import { Logger, makeWorkerUtils, run } from "graphile-worker"
import pg from "pg"

const silent = new Logger(() => () => {})

export interface GraphileSettings {
  readonly label: string
  readonly worker: Record<string, unknown>
}

/** Its documented fastest settings, and its defaults. */
export const fastest: GraphileSettings = {
  label: "graphile-worker (fastest)",
  worker: { concurrentJobs: 24, maxPoolSize: 25, localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 }
}
export const defaults: GraphileSettings = { label: "graphile-worker (defaults)", worker: {} }

export const seed = async (url: string, payloads: ReadonlyArray<unknown>) => {
  const utils = await makeWorkerUtils({ connectionString: url, logger: silent })
  try {
    await utils.migrate()
    for (let start = 0; start < payloads.length; start += 10_000) {
      await utils.addJobs(payloads.slice(start, start + 10_000).map((payload) => ({ identifier: "bench", payload })))
    }
  } finally {
    await utils.release()
  }
}

const remaining = async (url: string) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    const result = await client.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs")
    return result.rows[0].n as number
  } finally {
    await client.end()
  }
}

export const drain = async (url: string, settings: GraphileSettings) => {
  // Our own pool, ended here: the bench drops the database afterwards, and an idle client of
  // a pool nobody listens to would crash the process with an unhandled 'error'.
  const maxPoolSize = (settings.worker.maxPoolSize as number | undefined) ?? 10
  const pool = new pg.Pool({ connectionString: url, max: maxPoolSize })
  pool.on("error", () => undefined)
  const runner = await run({
    noHandleSignals: true,
    logger: silent,
    pgPool: pool,
    taskList: { bench: async () => {} },
    preset: { worker: { pollInterval: 1000, ...settings.worker } }
  } as never)
  try {
    while ((await remaining(url)) > 0) await new Promise((resolve) => setTimeout(resolve, 20))
  } finally {
    await runner.stop()
    await pool.end()
  }
}

/**
 * Commit-to-task latency: `count` jobs added one per transaction (`addJob`) at `rate` per
 * second while a runner with `settings` works; returns the sorted latencies in ms.
 */
export const measureLatency = async (url: string, settings: GraphileSettings, count: number, rate: number) => {
  const committed = new Map<number, number>()
  const received = new Map<number, number>()
  const pool = new pg.Pool({ connectionString: url, max: (settings.worker.maxPoolSize as number | undefined) ?? 10 })
  pool.on("error", () => undefined)
  const utils = await makeWorkerUtils({ connectionString: url, logger: silent })
  await utils.migrate()
  const runner = await run({
    noHandleSignals: true,
    logger: silent,
    pgPool: pool,
    taskList: {
      latency: async (payload: unknown) => {
        const i = (payload as { i: number }).i
        if (!received.has(i)) received.set(i, performance.now())
      }
    },
    preset: { worker: { ...settings.worker } }
  } as never)
  try {
    await new Promise((resolve) => setTimeout(resolve, 500)) // the listener connects
    const start = performance.now()
    for (let i = 0; i < count; i++) {
      await utils.addJob("latency", { i })
      committed.set(i, performance.now())
      const wait = start + ((i + 1) * 1000) / rate - performance.now()
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
    }
    while (received.size < count) await new Promise((resolve) => setTimeout(resolve, 10))
  } finally {
    await runner.stop()
    await utils.release()
    await pool.end()
  }
  return [...committed].map(([i, at]) => Math.max(0, received.get(i)! - at)).sort((a, b) => a - b)
}
