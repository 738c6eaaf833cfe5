// PostgreSQL's CPU time, read from /proc: the postmaster's own and its reaped children's
// (cutime/cstime) plus every live child's. The difference of two readings is the server's
// CPU spent in between, background workers and exited backends included. Works when the
// server runs on this machine (the embedded one, or a local DATABASE_URL).
import { readdirSync, readFileSync } from "node:fs"

const TICKS_PER_SECOND = 100 // USER_HZ on Linux

interface Stat {
  readonly ppid: number
  readonly ticks: number
  readonly childTicks: number
}

const stat = (pid: number): Stat | undefined => {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8")
    // Fields after the command name (which may contain spaces), from field 3 on.
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" ")
    return {
      ppid: Number(fields[1]),
      ticks: Number(fields[11]) + Number(fields[12]),
      childTicks: Number(fields[13]) + Number(fields[14])
    }
  } catch {
    return undefined // gone, or not visible
  }
}

/** The postmaster of a backend, if it is visible here. */
export const postmasterOf = (backendPid: number): number | undefined => {
  const backend = stat(backendPid)
  return backend === undefined ? undefined : backend.ppid
}

/** Server CPU seconds so far (see above). */
export const cpuSeconds = (postmaster: number): number => {
  const root = stat(postmaster)
  if (root === undefined) return Number.NaN
  let ticks = root.ticks + root.childTicks
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry)
    if (!Number.isInteger(pid)) continue
    const child = stat(pid)
    if (child?.ppid === postmaster) ticks += child.ticks
  }
  return ticks / TICKS_PER_SECOND
}
