// The bench's footing: one PostgreSQL, a fresh database per measurement, contenders
// alternating round by round, a drain in a child process with the server's CPU read around it.
import { spawn } from "node:child_process"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"
import { log, sleep } from "./common.js"
import * as PostgresCpu from "./postgresCpu.js"

export interface Bench {
  readonly quick: boolean
  readonly rounds: number
  /** Creates (or recreates) database `name` from template0; returns its URL. */
  readonly freshDatabase: (name: string) => Promise<string>
  readonly dropDatabase: (name: string) => Promise<void>
  /** Runs `statement` in database `url` on a short-lived connection. */
  readonly execute: (url: string, statement: string) => Promise<Array<Record<string, unknown>>>
  /**
   * PostgreSQL CPU seconds so far, or NaN when the server is not on this machine; read after
   * a pause, so that backends of closed connections have exited and been reaped (a backend
   * between its exit and its reaping shows in no counter).
   */
  readonly serverCpuSecondsSettled: () => Promise<number>
  /** The WAL's insert position now, and the bytes written since one (`pg_wal_lsn_diff`). */
  readonly walPosition: () => Promise<string>
  readonly walBytesSince: (position: string) => Promise<number>
  /**
   * With BENCH_STATEMENTS=1 (the server loads pg_stat_statements, tracking statements inside
   * functions too): forget the counts, and log the statements that took the most server time
   * since, per message. Otherwise nothing.
   */
  readonly resetStatements: () => Promise<void>
  readonly reportStatements: (label: string, messages: number) => Promise<void>
}

/** Whether this run reports the server's statements (see `Bench.reportStatements`). */
export const statementsReported = process.env.BENCH_STATEMENTS === "1"

/** The server settings a statements report needs (the server must be started with them). */
export const statementSettings: Readonly<Record<string, string>> = statementsReported
  ? { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": "all" }
  : {}

export const make = async (options: {
  readonly quick: boolean
  readonly rounds: number
  readonly urlOf: (database: string) => string
}): Promise<Bench & { readonly close: () => Promise<void>; readonly version: string }> => {
  const admin = new pg.Client({ connectionString: options.urlOf("postgres") })
  await admin.connect()
  const { rows } = await admin.query("SELECT current_setting('server_version') AS version, pg_backend_pid() AS pid")
  const postmaster = PostgresCpu.postmasterOf(rows[0].pid)
  const execute = async (url: string, statement: string) => {
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      return (await client.query(statement)).rows
    } finally {
      await client.end()
    }
  }
  return {
    quick: options.quick,
    rounds: options.rounds,
    version: rows[0].version,
    freshDatabase: async (name) => {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await admin.query(`CREATE DATABASE ${name} TEMPLATE template0`)
      return options.urlOf(name)
    },
    dropDatabase: async (name) => void (await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)),
    execute,
    serverCpuSecondsSettled: async () => {
      await sleep(200)
      return postmaster === undefined ? Number.NaN : PostgresCpu.cpuSeconds(postmaster)
    },
    walPosition: async () => (await admin.query("SELECT pg_current_wal_insert_lsn()::text AS lsn")).rows[0].lsn,
    walBytesSince: async (position) =>
      Number(
        (await admin.query("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::float8 AS bytes", [
          position
        ]))
          .rows[0].bytes
      ),
    resetStatements: async () => {
      if (!statementsReported) return
      await admin.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
      await admin.query("SELECT pg_stat_statements_reset()")
    },
    reportStatements: async (label, messages) => {
      if (!statementsReported) return
      const { rows } = await admin.query(
        `SELECT calls::int, total_exec_time::float8 AS ms, rows::bigint::int AS rows, wal_bytes::float8 AS wal,
                regexp_replace(left(query, 160), '\\s+', ' ', 'g') AS query
           FROM pg_stat_statements WHERE dbid <> (SELECT oid FROM pg_database WHERE datname = 'postgres')
          ORDER BY total_exec_time DESC LIMIT 8`
      )
      log(`    statements of ${label} (server time per message, calls, WAL per message):`)
      for (const row of rows) {
        log(
          `      ${(row.ms * 1000 / messages).toFixed(1).padStart(6)} µs  ${String(row.calls).padStart(6)} calls  ${
            (row.wal / messages).toFixed(0).padStart(5)
          } B  ${row.query}`
        )
      }
    },
    close: () => admin.end()
  }
}

/** Calls `measure(item, round)` for every round and item, items alternating (A B A B …). */
export const alternate = async <A, R>(
  bench: Bench,
  items: ReadonlyArray<A>,
  measure: (item: A, round: number, index: number) => Promise<R>
): Promise<Array<Array<R>>> => {
  const results = items.map(() => [] as Array<R>)
  for (let round = 1; round <= bench.rounds; round++) {
    for (const [index, item] of items.entries()) results[index]!.push(await measure(item, round, index))
  }
  return results
}

export interface DrainRun {
  readonly seconds: number
  readonly peakRssMB: number
}

// The drain process runs compiled JavaScript (`npm run bench` builds it first), as a
// deployed worker would: no TypeScript loader thread, no transformed sources in memory.
const workerScript = join(dirname(fileURLToPath(import.meta.url)), "..", "dist", "drainWorker.js")

/**
 * Drains database `url` with contender `name` in a child process (see drainWorker.ts). With
 * `timeoutMillis`, a drain still running then is killed and answers `undefined`.
 */
export function drainInChild(name: string, url: string, count: number): Promise<DrainRun>
export function drainInChild(
  name: string,
  url: string,
  count: number,
  timeoutMillis: number
): Promise<DrainRun | undefined>
export function drainInChild(name: string, url: string, count: number, timeoutMillis?: number) {
  return new Promise<DrainRun | undefined>((resolve, reject) => {
    // BENCH_CPU_PROFILE=<dir>: each drain process writes a V8 CPU profile there (what bounds a drain).
    const profile = process.env.BENCH_CPU_PROFILE
    const flags = profile === undefined || profile === "" ? [] : ["--cpu-prof", `--cpu-prof-dir=${profile}`]
    const child = spawn(process.execPath, [...flags, workerScript, name, url, String(count)], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    let timedOut = false
    const timer = timeoutMillis === undefined ? undefined : setTimeout(() => {
      timedOut = true
      child.kill("SIGKILL")
    }, timeoutMillis)
    let output = ""
    child.stdout.on("data", (chunk) => (output += chunk))
    child.on("error", reject)
    child.on("exit", (code) => {
      if (timer !== undefined) clearTimeout(timer)
      if (timedOut) return resolve(undefined)
      const line = output.trim().split("\n").pop() ?? ""
      if (code === 0 && line.startsWith("{")) resolve(JSON.parse(line))
      else reject(new Error(`drain worker for ${name} exited with ${code}: ${output}`))
    })
  })
}

/** Logs a progress line for one measurement. */
export const progress = (round: number, name: string, detail: string) =>
  log(`  round ${round}  ${name.padEnd(32)} ${detail}`)
