/**
 * A test fixture in a process of its own, for tests that kill it for real (SIGKILL mid-work):
 * a TypeScript file run by the current Node with the workspace's sources (`--conditions=source`
 * and tsx), its stderr kept for the failure message.
 *
 * @since 0.2.0
 */
import { type ChildProcess, spawn as spawnChild } from "node:child_process"

export interface Fixture {
  readonly child: ChildProcess
  /** Resolves with the signal that ended the process (null when it exited on its own). */
  readonly exited: Promise<NodeJS.Signals | null>
  /** What it wrote to stderr so far. */
  readonly stderr: () => string
}

/** Starts `file` with `env` added to this process's environment. */
export const spawn = (file: string, env: Readonly<Record<string, string>>): Fixture => {
  const child = spawnChild(process.execPath, ["--conditions=source", "--import", "tsx", file], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "ignore", "pipe"]
  })
  let stderr = ""
  child.stderr!.on("data", (chunk) => (stderr += chunk))
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once("exit", (_, signal) => resolve(signal)))
  return { child, exited, stderr: () => stderr }
}
