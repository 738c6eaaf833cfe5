import { describe, expect, it } from "@effect/vitest"
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Redacted from "effect/Redacted"
import { spawn } from "node:child_process"
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"
import * as DevDatabase from "../src/DevDatabase.js"

const quiet = Effect.provide(Logger.layer([]))

/** A project folder of its own for each test (open to other users, as a project folder is), removed afterwards. */
const project = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = mkdtempSync(join(tmpdir(), "effect-durable-dev-test-"))
    chmodSync(dir, 0o755)
    return dir
  }),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

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

/** Starts the database in `directory`, runs `use` on it, stops it. */
const session = <A, E>(directory: string, use: (db: DevDatabase.DevDatabase["Service"]) => Effect.Effect<A, E>) =>
  Effect.scoped(Effect.flatMap(DevDatabase.make({ directory }), use)).pipe(quiet)

describe("the development database", () => {
  it.live("keeps its rows across a restart, in the project folder, with durability on", () =>
    Effect.gen(function*() {
      const root = yield* project
      const directory = join(root, ".effect-durable", "postgres")
      const first = yield* session(directory, (db) =>
        Effect.gen(function*() {
          expect(db.created).toBe(true)
          expect(db.directory).toBe(directory)
          yield* query(db.url, "CREATE TABLE notes (id int PRIMARY KEY, body text)")
          yield* query(db.url, "INSERT INTO notes VALUES (1, 'kept')")
          return {
            port: db.port,
            settings: yield* query(
              db.url,
              "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'data_directory') ORDER BY name"
            )
          }
        }))
      expect(first.settings).toEqual([
        { name: "data_directory", setting: join(directory, "data") },
        { name: "fsync", setting: "on" },
        { name: "full_page_writes", setting: "on" },
        { name: "synchronous_commit", setting: "on" }
      ])
      const second = yield* session(directory, (db) =>
        Effect.gen(function*() {
          expect(db.created).toBe(false)
          return { port: db.port, rows: yield* query(db.url, "SELECT * FROM notes") }
        }))
      expect(second.rows).toEqual([{ id: 1, body: "kept" }])
      expect(second.port).toBe(first.port)
    }), 120_000)

  it.live(
    "a second user in the same process attaches to the owner's server (owned: false) and leaves it running; attach: false refuses it with DevDatabaseLocked",
    () =>
      Effect.gen(function*() {
        const directory = join(yield* project, "db")
        yield* session(directory, (owner) =>
          Effect.gen(function*() {
            expect(owner.owned).toBe(true)
            const attached = yield* session(
              directory,
              (db) => Effect.map(query(db.url, "SELECT 1 AS one"), (rows) => ({ owned: db.owned, port: db.port, rows }))
            )
            expect(attached).toEqual({ owned: false, port: owner.port, rows: [{ one: 1 }] })
            // The attached user's scope has closed: the owner's server still answers.
            expect(yield* query(owner.url, "SELECT 2 AS two")).toEqual([{ two: 2 }])
            const error = yield* Effect.flip(
              Effect.scoped(DevDatabase.make({ directory, attach: false })).pipe(quiet)
            )
            expect(error._tag).toBe("DevDatabaseLocked")
            expect(error).toMatchObject({ directory, pid: process.pid, serving: true })
            expect(error.message).toMatch(/in use by process \d+ .*attach: false refuses to share it/)
          }))
      }),
    120_000
  )

  it.live(
    "a second app attaches to the first's server while it runs; after the first is killed the data is intact and a new owner starts",
    () =>
      Effect.gen(function*() {
        const directory = join(yield* project, "db")
        yield* session(directory, (db) => query(db.url, "CREATE TABLE t AS SELECT 42 AS answer"))
        const holder = spawn(process.execPath, ["--conditions=source", "--import", "tsx", fixture, directory], {
          stdio: ["ignore", "pipe", "pipe"]
        })
        const exited = new Promise<void>((resolve) => holder.once("exit", () => resolve()))
        yield* Effect.addFinalizer(() => Effect.promise(() => (holder.kill("SIGKILL"), exited)))
        const held = yield* Effect.promise(() => firstLine(holder))
        const attached = yield* session(directory, (db) =>
          Effect.map(query(db.url, "SELECT answer FROM t"), (rows) => ({ owned: db.owned, port: db.port, rows })))
        expect(attached).toEqual({ owned: false, port: held.port, rows: [{ answer: 42 }] })
        const locked = yield* Effect.flip(Effect.scoped(DevDatabase.make({ directory, attach: false })).pipe(quiet))
        expect(locked).toMatchObject({ _tag: "DevDatabaseLocked", pid: held.pid, serving: true })
        // The owner dies without stopping its server: its guardian stops it, the lock is stale.
        holder.kill("SIGKILL")
        yield* Effect.promise(() =>
          exited
        )
        const after = yield* session(directory, (db) =>
          Effect.map(query(db.url, "SELECT answer FROM t"), (rows) => ({ owned: db.owned, rows })))
        expect(after).toEqual({ owned: true, rows: [{ answer: 42 }] })
      }),
    120_000
  )

  it.live(
    "an owner whose server never comes up is DevDatabaseLocked after attachTimeout, not a wait forever",
    () =>
      Effect.gen(function*() {
        const directory = join(yield* project, "db")
        // A live owner (this process, as the lock names it) that never starts a server.
        mkdirSync(directory, { mode: 0o755 })
        writeFileSync(join(directory, "lock"), JSON.stringify({ pid: process.pid, started: null }))
        const error = yield* Effect.flip(
          Effect.scoped(DevDatabase.make({ directory, attachTimeout: "1 second" })).pipe(quiet)
        )
        expect(error).toMatchObject({ _tag: "DevDatabaseLocked", directory, pid: process.pid, serving: false })
        expect(error.message).toMatch(/did not accept connections in time/)
        expect(existsSync(join(directory, "data"))).toBe(false)
      }),
    30_000
  )

  it.live(
    "the log line shows the URL without its password, and says where the password is",
    () =>
      Effect.gen(function*() {
        const directory = join(yield* project, "db")
        const lines: Array<string> = []
        const capture = Logger.layer([Logger.make(({ message }) => lines.push(String(message)))])
        const password = yield* Effect.scoped(Effect.gen(function*() {
          const db = yield* DevDatabase.make({ directory })
          // An attached user logs its line too.
          yield* Effect.scoped(DevDatabase.make({ directory }))
          return { port: db.port, password: new URL(Redacted.value(db.url)).password }
        })).pipe(Effect.provide(capture))
        expect(password.password).toMatch(/^[0-9a-f]{32}$/)
        expect(lines).toHaveLength(2)
        const shown = `postgres://postgres@127.0.0.1:${password.port}/postgres`
        expect(lines[0]).toBe(
          `development database created: ${shown} (password in ${join(directory, "server.json")}; data in ${directory})`
        )
        expect(lines[1]).toContain(`attached: ${shown} (password in ${join(directory, "server.json")})`)
        for (const line of lines) expect(line).not.toContain(password.password)
        expect(JSON.parse(readFileSync(join(directory, "server.json"), "utf8"))).toMatchObject({
          password: password.password,
          port: password.port
        })
      }),
    120_000
  )

  it.live("as root the server runs as the postgres user, which owns only data/", () =>
    Effect.gen(function*() {
      const directory = join(yield* project, "db")
      yield* session(directory, () => Effect.void)
      const saved = statSync(join(directory, "server.json"))
      expect(saved.mode & 0o777).toBe(0o600)
      expect(saved.uid).toBe(process.getuid!())
      const data = statSync(join(directory, "data"))
      if (process.getuid!() === 0) expect(data.uid).not.toBe(0)
      else expect(data.uid).toBe(process.getuid!())
      expect(data.mode & 0o777).toBe(0o700)
      expect(existsSync(join(directory, "lock"))).toBe(false)
      expect(readFileSync(join(directory, "server.log"), "utf8")).toMatch(/database system is shut down/)
    }), 120_000)

  it.live(
    "a folder the server's OS user cannot enter is a DevDatabaseError that says so (as root); otherwise it starts",
    () =>
      Effect.gen(function*() {
        const root = yield* project
        chmodSync(root, 0o700)
        const directory = join(root, "db")
        const exit = yield* Effect.exit(session(directory, () => Effect.void))
        if (process.getuid!() === 0) {
          const error = yield* Effect.flip(exit)
          expect(error._tag).toBe("DevDatabaseError")
          expect(error.message).toMatch(/runs as the OS user "postgres", which cannot enter/)
          expect(existsSync(join(directory, "lock"))).toBe(false)
        } else {
          expect(exit._tag).toBe("Success")
        }
      }),
    120_000
  )

  it.live(
    "layerDatabaseUrl gives Config readers DATABASE_URL: the development database's when the variable is unset",
    () =>
      Effect.gen(function*() {
        const directory = join(yield* project, "db")
        const readUrl = Layer.effectDiscard(Effect.flatMap(Config.Redacted("DATABASE_URL"), (url) =>
          Effect.flatMap(query(url, "SELECT 1 AS one"), (rows) =>
            Effect.sync(() =>
              expect(rows).toEqual([{ one: 1 }])
            ))))
        yield* Layer.build(readUrl.pipe(Layer.provide(DevDatabase.layerDatabaseUrl({ directory })))).pipe(
          Effect.scoped,
          quiet,
          Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord({}))
        )
        expect(existsSync(join(directory, "data", "PG_VERSION"))).toBe(true)
      }),
    120_000
  )

  it.live("layerDatabaseUrl leaves a set DATABASE_URL alone and starts nothing", () =>
    Effect.gen(function*() {
      const directory = join(yield* project, "db")
      const url = yield* Layer.build(
        Layer.effectDiscard(Effect.flatMap(Config.String("DATABASE_URL"), (url) =>
          Effect.sync(() =>
            expect(url).toBe("postgres://elsewhere/app")
          ))).pipe(
            Layer.provide(DevDatabase.layerDatabaseUrl({ directory }))
          )
      ).pipe(
        Effect.scoped,
        Effect.provideService(
          ConfigProvider.ConfigProvider,
          ConfigProvider.fromEnvRecord({ ["DATABASE_URL"]: "postgres://elsewhere/app" })
        )
      )
      expect(url).toBeDefined()
      expect(existsSync(directory)).toBe(false)
    }))
})

const fixture = fileURLToPath(new URL("./fixtures/hold-dev-database.ts", import.meta.url))

const firstLine = (child: ReturnType<typeof spawn>) =>
  new Promise<{ readonly pid: number; readonly port: number }>((resolve, reject) => {
    let stdout = ""
    let stderr = ""
    child.stderr!.on("data", (chunk) => (stderr += chunk))
    child.stdout!.on("data", (chunk) => {
      stdout += chunk
      if (stdout.includes("\n")) resolve(JSON.parse(stdout.split("\n")[0]!))
    })
    child.once("exit", (code) => reject(new Error(`holder exited (${code}) before reporting: ${stderr}`)))
  })
