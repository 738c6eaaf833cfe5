/**
 * The processes a run starts, and the promise that none outlives it. Every child's pid goes
 * to the run directory's `pids` file; a detached guardian shell watches this process and,
 * once it is gone for any reason (even SIGKILL), continues and kills every listed process
 * that still runs from this run (its command line names the run directory), then deletes
 * the directory. A normal end does the same itself and dismisses the guardian.
 *
 * Children are plain `child_process` spawns rather than `@effect/platform` Commands: the
 * faults need SIGSTOP/SIGCONT and a SIGKILL whose exit is awaited, and the guardian needs
 * every pid at once.
 */
import * as Redacted from "effect/Redacted"
import { type ChildProcess, spawn } from "node:child_process"
import { appendFileSync, chmodSync, closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"

const GUARDIAN = `
parent=$1; dir=$2
while kill -0 "$parent" 2>/dev/null; do sleep 0.2; done
if [ -f "$dir/pids" ]; then
  for pid in $(cat "$dir/pids"); do
    if grep -qF "$dir" "/proc/$pid/cmdline" 2>/dev/null; then
      kill -CONT "$pid" 2>/dev/null
      kill -KILL "$pid" 2>/dev/null
    fi
  done
fi
rm -rf "$dir"
`

export interface RunDirectory {
  readonly path: string
  /** Records a pid for the guardian. */
  readonly remember: (pid: number) => void
  /** Dismisses the guardian and deletes the directory (unless `keep`). */
  readonly dispose: (keep: boolean) => void
}

/** Watches `path` (created by the caller) on behalf of this process. */
export const guard = (path: string): RunDirectory => {
  const guardian = spawn("sh", ["-c", GUARDIAN, "chaos-guardian", String(process.pid), path], {
    detached: true,
    stdio: "ignore"
  })
  guardian.unref()
  const pids = join(path, "pids")
  return {
    path,
    remember: (pid) => appendFileSync(pids, `${pid}\n`),
    dispose: (keep) => {
      if (guardian.exitCode === null) guardian.kill("SIGTERM")
      if (!keep) rmSync(path, { recursive: true, force: true })
    }
  }
}

/** A run directory under the temp dir, enterable by the servers' own OS users, guarded. */
export const runDirectory = (prefix: string): RunDirectory => {
  const path = mkdtempSync(join(tmpdir(), prefix))
  // PgBouncer runs as its own OS user and keeps its files in here.
  chmodSync(path, 0o711)
  return guard(path)
}

export interface Child {
  readonly name: string
  readonly pid: number
  /** Resolves when the process has exited, with its code or signal. */
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
  readonly running: () => boolean
  readonly signal: (signal: NodeJS.Signals) => void
  /** The end of its log (stdout and stderr), for a report and for readiness. */
  readonly logTail: (lines: number) => string
}

/**
 * Runs `script` (compiled JavaScript) with Node, one JSON argument, its output in
 * `<run>/<name>.log`. The run directory is in its arguments so the guardian recognises it.
 */
export const spawnNode = (run: RunDirectory, name: string, script: string, config: unknown): Child => {
  const logPath = join(run.path, `${name}.log`)
  const log = openSync(logPath, "a")
  let child: ChildProcess
  try {
    child = spawn(process.execPath, [script, JSON.stringify(config), run.path], { stdio: ["ignore", log, log] })
  } finally {
    closeSync(log)
  }
  if (child.pid === undefined) throw new Error(`could not start ${name}`)
  run.remember(child.pid)
  let done = false
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => {
      done = true
      resolve({ code, signal })
    })
  )
  return {
    name,
    pid: child.pid,
    exited,
    running: () => !done,
    signal: (signal) => {
      if (!done) child.kill(signal)
    },
    logTail: (lines) => {
      try {
        return readFileSync(logPath, "utf8").trimEnd().split("\n").slice(-lines).join("\n")
      } catch {
        return ""
      }
    }
  }
}

/** SIGCONT (a stopped process cannot act on SIGTERM) and SIGTERM; SIGKILL after `graceMillis`. */
export const stop = async (child: Child, graceMillis: number): Promise<void> => {
  if (!child.running()) return
  child.signal("SIGCONT")
  child.signal("SIGTERM")
  const timer = setTimeout(() => child.signal("SIGKILL"), graceMillis)
  await child.exited
  clearTimeout(timer)
}

/** Creates database `name` on the run's server (from template0), as `applicationName`. */
export const createDatabase = async (
  server: { readonly url: () => Redacted.Redacted<string> },
  name: string,
  applicationName: string
): Promise<void> => {
  const client = new pg.Client({ connectionString: Redacted.value(server.url()), application_name: applicationName })
  await client.connect()
  try {
    await client.query(`CREATE DATABASE ${name} TEMPLATE template0`)
  } finally {
    await client.end()
  }
}
