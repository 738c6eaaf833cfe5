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
