/**
 * The development database's server: creates the cluster on first use (initdb into a side
 * directory, renamed into place only when complete), takes the directory's lock, starts
 * `postgres` with the durability settings left on, and keeps a guardian that stops the
 * server — without deleting anything — if this process dies without stopping it.
 */
import { type ChildProcess, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import {
  chownSync,
  createWriteStream,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync
} from "node:fs"
import { join } from "node:path"
import { spawnGuardian } from "../Guardian.js"
import { LockHeld, takeLock } from "./lock.js"
import {
  binaries,
  freePort,
  halt,
  launch,
  portIsFree,
  processAlive,
  readPostmasterPid,
  run,
  serverUser
} from "./server.js"

export interface Started {
  readonly directory: string
  readonly port: number
  readonly password: string
  readonly created: boolean
  readonly stop: () => Promise<void>
}

interface Saved {
  readonly password: string
  readonly port?: number
}

const SAVED = "server.json"

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const isPostgres = (pid: number): boolean => {
  if (!processAlive(pid)) return false
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").startsWith("postgres")
  } catch {
    return true
  }
}

/** A server left running on this data by an owner that died: its guardian is stopping it. */
const awaitLeftover = async (pgdata: string): Promise<void> => {
  const pid = readPostmasterPid(pgdata)
  if (pid === undefined) return
  for (let waited = 0; waited < 30_000 && isPostgres(pid); waited += 100) await sleep(100)
  if (isPostgres(pid)) {
    throw new Error(
      `a PostgreSQL server (pid ${pid}) still runs on ${pgdata} although no app owns it: stop it (kill -INT ${pid})`
    )
  }
}

/**
 * The server another process runs on `directory`, once PostgreSQL says it accepts
 * connections (status `ready` in its `postmaster.pid`, whose postmaster is alive): its port
 * and the saved password. Undefined while it is starting, stopping, or not there.
 */
export const serving = (directory: string): { readonly port: number; readonly password: string } | undefined => {
  let lines: Array<string>
  try {
    lines = readFileSync(join(directory, "data", "postmaster.pid"), "utf8").split("\n")
  } catch {
    return undefined
  }
  // Lines 1, 4 and 8 of postmaster.pid: the postmaster's pid, its port and its status.
  const pid = Number.parseInt(lines[0] ?? "", 10)
  const port = Number.parseInt(lines[3] ?? "", 10)
  if (!Number.isInteger(pid) || !Number.isInteger(port) || lines[7]?.trim() !== "ready" || !isPostgres(pid)) {
    return undefined
  }
  try {
    const saved = JSON.parse(readFileSync(join(directory, SAVED), "utf8")) as Saved
    return typeof saved.password === "string" ? { port, password: saved.password } : undefined
  } catch {
    return undefined
  }
}

export const acquire = async (
  directory: string,
  options: {
    readonly port?: number
    readonly settings?: Readonly<Record<string, string>>
    readonly installedAt?: string
  }
): Promise<Started> => {
  mkdirSync(directory, { recursive: true, mode: 0o755 })
  const release = takeLock(join(directory, "lock"))
  const tail: Array<string> = []
  const log = createWriteStream(join(directory, "server.log"), { flags: "a" })
  log.on("error", () => undefined)
  const remember = (text: string) => {
    tail.push(text)
    if (tail.length > 50) tail.shift()
    log.write(text)
  }
  let guardian: ChildProcess | undefined
  let child: ChildProcess | undefined
  try {
    const pgdata = join(directory, "data")
    await awaitLeftover(pgdata)
    const user = serverUser()
    if (user.uid !== undefined) {
      const reach = spawnSync("sh", ["-c", `cd "$1"`, "sh", directory], {
        uid: user.uid,
        gid: user.gid!,
        stdio: "ignore"
      })
      if (reach.status !== 0) {
        throw new Error(
          `PostgreSQL refuses to run as root, so it runs as the OS user "postgres", which cannot enter ${directory} ` +
            `(a folder above it, such as /root, is closed to other users): keep the project, or the directory ` +
            `(the "directory" option of DevDatabase.layer), where other users may enter`
        )
      }
    }
    const { initdb, postgres } = await binaries(options.installedAt)
    const savedPath = join(directory, SAVED)
    const created = !existsSync(join(pgdata, "PG_VERSION"))
    let saved: Saved
    if (created) {
      saved = { password: randomBytes(16).toString("hex") }
      // initdb writes into a side directory: an interrupted first start leaves no half cluster behind.
      const draft = join(directory, "data.init")
      rmSync(draft, { recursive: true, force: true })
      mkdirSync(draft, { mode: 0o700 })
      const pwfile = join(directory, ".pwfile")
      writeFileSync(pwfile, `${saved.password}\n`, { mode: 0o600 })
      if (user.uid !== undefined) {
        chownSync(draft, user.uid, user.gid!)
        chownSync(pwfile, user.uid, user.gid!)
      }
      try {
        await run(initdb, [
          "-D",
          draft,
          "-U",
          "postgres",
          `--pwfile=${pwfile}`,
          "--auth=scram-sha-256",
          "--encoding=UTF8",
          "--locale=C"
        ], {
          ...user,
          env: { ...process.env, LC_ALL: "C" }
        })
      } finally {
        rmSync(pwfile, { force: true })
      }
      writeFileSync(savedPath, JSON.stringify(saved), { mode: 0o600 })
      renameSync(draft, pgdata)
    } else {
      try {
        saved = JSON.parse(readFileSync(savedPath, "utf8")) as Saved
      } catch {
        throw new Error(
          `${savedPath} (the database's password) is missing or damaged: delete ${directory} to start afresh`
        )
      }
    }
    const port = options.port ??
      (saved.port !== undefined && await portIsFree(saved.port) ? saved.port : await freePort())
    if (port !== saved.port) writeFileSync(savedPath, JSON.stringify({ ...saved, port }), { mode: 0o600 })
    guardian = spawnGuardian(directory, "postmaster", { keep: true })
    const settings = { ...options.settings, listen_addresses: "127.0.0.1", unix_socket_directories: "" }
    try {
      child = await launch(postgres, pgdata, port, settings, user, remember)
    } catch (error) {
      // PostgreSQL's own lock on its data directory: a server someone else started.
      const holder = readPostmasterPid(pgdata)
      if (holder !== undefined && tail.join("").includes(`lock file "postmaster.pid" already exists`)) {
        throw new LockHeld(holder)
      }
      throw error
    }
    const running = child
    const dismiss = guardian
    let stopped = false
    return {
      directory,
      port,
      password: saved.password,
      created,
      stop: async () => {
        if (stopped) return
        stopped = true
        await halt(running)
        dismiss.kill("SIGTERM")
        await new Promise((resolve) => log.end(resolve))
        release()
      }
    }
  } catch (error) {
    if (child !== undefined) await halt(child)
    guardian?.kill("SIGTERM")
    log.end()
    release()
    if (error instanceof LockHeld) throw error
    const logged = tail.join("").trim()
    throw new Error(`${error instanceof Error ? error.message : String(error)}${logged === "" ? "" : `\n${logged}`}`, {
      cause: error
    })
  }
}
