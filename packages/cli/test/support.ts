// What the CLI suites share: the built binary run as a child process (never a terminal: stdin
// is /dev/null), a migrated database per suite with its URL, and rows made the way the
// substrate makes them.
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as Effect from "effect/Effect"
import type * as HttpServer from "effect/http/HttpServer"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { type ChildProcess, spawn } from "node:child_process"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

export const PACKAGE = join(dirname(fileURLToPath(import.meta.url)), "..")
/** The command as the package ships it (its `bin`): the bundle of dist/bin.js. */
export const BIN = join(PACKAGE, "dist", "bundle", "effect-durable.mjs")

export interface Result {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

export interface RunOptions {
  readonly env?: Readonly<Record<string, string | undefined>>
  /** Called on every chunk of stderr with all of it so far (to send a signal at the right moment). */
  readonly onStderr?: (stderr: string, child: ChildProcess) => void
  readonly onStdout?: (stdout: string, child: ChildProcess) => void
  /** The working directory (default: the test's). */
  readonly cwd?: string
  /** The command's file (default: BIN, the package's own). */
  readonly bin?: string
}

/** Runs `effect-durable ...args` to its end. The test's DATABASE_URL is never inherited: tests pass it. */
export const runCli = (args: ReadonlyArray<string>, options: RunOptions = {}): Promise<Result> =>
  new Promise((resolve, reject) => {
    const { DATABASE_URL: _url, DURABLE_SCHEMA: _schema, ...inherited } = process.env
    const child = spawn(process.execPath, [options.bin ?? BIN, ...args], {
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
      env: { ...inherited, NO_COLOR: "1", ...options.env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk
      options.onStdout?.(stdout, child)
    })
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk
      options.onStderr?.(stderr, child)
    })
    child.on("error", reject)
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }))
  })

export const cli = (args: ReadonlyArray<string>, options: RunOptions = {}) =>
  Effect.promise(() => runCli(args, options))

/** `--json` output, parsed. */
export const json = <A = any>(result: Result): A => JSON.parse(result.stdout) as A

/** A migrated substrate in a fresh database (the suite's), and the services to arrange rows with. */
export const Substrate = TestSubstrate.layer()

/** The suite's database URL (a superuser's). */
export const databaseUrl = Effect.map(TestDatabase.TestDatabase, (db) => Redacted.value(db.url))

/** `effect-durable ...args` on the suite's database (its URL in DATABASE_URL, as an operator would give it). */
export const cliOn = (args: ReadonlyArray<string>, options: RunOptions = {}) =>
  Effect.flatMap(databaseUrl, (url) => cli(args, { ...options, env: { DATABASE_URL: url, ...options.env } }))

export const freshTopic = TestSubstrate.freshName

/** Enqueues `n` messages on `topic`; returns their ids. */
export const enqueue = (topic: string, n: number, payload: (i: number) => unknown = (i) => ({ n: i })) =>
  Effect.flatMap(
    Outbox.Outbox,
    (outbox) => outbox.enqueueMany(Array.from({ length: n }, (_, i) => ({ topic, payload: payload(i) })))
  )

/** Enqueues `n` messages on `topic` and makes them dead letters the way a worker does. */
export const deadLetters = (topic: string, n: number, error = (id: string) => `order ${id} not found`) =>
  Effect.gen(function*() {
    yield* enqueue(topic, n)
    const worker = yield* OutboxWorker.OutboxWorker
    const claimed = yield* worker.claim({ worker: "test", topics: [topic], limit: 1000, lease: "1 minute" })
    for (const m of claimed) yield* worker.release(m.claim, { error: error(m.id), retryDelay: 0, permanent: true })
    return claimed.map((m) => m.id)
  })

/** The outbox's rows of `topic`: id and state, in id order. */
export const rowsOf = (topic: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // Every message of the topic, wherever it is now: open, dead or delivered.
    const table = sql.literal((yield* DurableSettings).table("outbox_messages"))
    return yield* sql<{ id: string; dead: boolean; projected: boolean; attempts: number }>`
      SELECT id::text, dead_at IS NOT NULL AS dead, projected_at IS NOT NULL AS projected, attempt_count AS attempts
        FROM ${table} WHERE topic = ${topic} ORDER BY id`
  })

/** The port a test's HTTP server listens on. */
export const portOf = (server: HttpServer.HttpServer["Service"]): number =>
  server.address._tag === "UnixPathAddress" ? 0 : server.address.port

/** Runs SQL as the suite's superuser. */
export const exec = (text: string) => Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(text))
