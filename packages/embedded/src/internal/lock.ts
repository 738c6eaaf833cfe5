/**
 * One owner per directory: a lock file that names its owner (pid and the process's start
 * time, so a reused pid is not mistaken for the owner). A lock whose owner is gone — killed,
 * crashed, machine rebooted — is stale and taken over.
 */
import { linkSync, readFileSync, renameSync, rmSync, unlinkSync, writeFileSync } from "node:fs"
import { processAlive } from "./server.js"

/** Thrown when a live process holds the lock. */
export class LockHeld extends Error {
  constructor(readonly pid: number) {
    super(`held by process ${pid}`)
  }
}

interface Owner {
  readonly pid: number
  readonly started: string | null
}

// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot.
const processStart = (pid: number): string | null => {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ")[19] ?? null
  } catch {
    return null
  }
}

const readOwner = (path: string): { readonly text: string; readonly owner: Owner | undefined } | undefined => {
  let text: string
  try {
    text = readFileSync(path, "utf8")
  } catch {
    return undefined
  }
  try {
    const parsed = JSON.parse(text) as Owner
    return { text, owner: Number.isInteger(parsed.pid) && parsed.pid > 0 ? parsed : undefined }
  } catch {
    return { text, owner: undefined }
  }
}

const alive = (owner: Owner): boolean =>
  processAlive(owner.pid) && (owner.started === null || processStart(owner.pid) === owner.started)

/** Takes the lock at `path` or throws `LockHeld`; returns its release. */
export const takeLock = (path: string): () => void => {
  const mine = JSON.stringify({ pid: process.pid, started: processStart(process.pid) } satisfies Owner)
  const draft = `${path}.${process.pid}`
  writeFileSync(draft, mine)
  try {
    for (let attempt = 0; attempt < 10; attempt++) {
      try {
        // A hard link appears whole or not at all, and fails when the lock exists.
        linkSync(draft, path)
        return () => {
          if (readOwner(path)?.text === mine) rmSync(path, { force: true })
        }
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
      }
      const held = readOwner(path)
      if (held === undefined) continue
      if (held.owner !== undefined && alive(held.owner)) throw new LockHeld(held.owner.pid)
      // Stale. Move it aside under a name of our own, then make sure what moved is the stale
      // lock and not one a racing process has just taken; if it is theirs, put it back.
      const aside = `${path}.stale.${process.pid}`
      try {
        renameSync(path, aside)
      } catch {
        continue
      }
      if (readOwner(aside)?.text !== held.text) {
        try {
          linkSync(aside, path)
        } catch {
          // Someone took the free slot meanwhile: the next round reads their lock.
        }
      }
      unlinkSync(aside)
    }
    throw new Error(`could not take the lock ${path} (it keeps changing hands)`)
  } finally {
    rmSync(draft, { force: true })
  }
}
