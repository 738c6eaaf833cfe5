/**
 * The projector processes of a run: one slot per worker, each running one incarnation at a
 * time. Faults kill, stop and continue them; a worker that exits on its own (it could not
 * reach the database while it started, say) is started again, as a process supervisor
 * would, and counted.
 */
import { type Child, type RunDirectory, spawnNode, stop } from "./children.js"
import type { WorkerConfig } from "./substrate.js"

export interface Slot {
  readonly index: number
  incarnation: number
  child: Child
  workerId: string
  /** `killed`: between a SIGKILL and the restart; `stopped`: SIGSTOPped. */
  state: "running" | "stopped" | "killed"
}

export interface Workers {
  readonly slots: ReadonlyArray<Slot>
  readonly kill: (slot: Slot) => Promise<void>
  readonly restart: (slot: Slot) => void
  /** A deploy's step: the slot's process stopped (SIGTERM, its runs finish or are cut) and started again, its config read anew. */
  readonly replace: (slot: Slot) => Promise<void>
  readonly pause: (slot: Slot) => void
  readonly resume: (slot: Slot) => void
  /** Workers that exited without being told to. */
  readonly unexpectedExits: () => ReadonlyArray<string>
  /** Stops every worker (SIGTERM, in-flight work finishes or is released). */
  readonly shutdown: () => Promise<void>
}

export const start = (
  run: RunDirectory,
  script: string,
  count: number,
  config: (index: number, workerId: string) => WorkerConfig
): Workers => {
  let closing = false
  const unexpected: Array<string> = []
  const slots: Array<Slot> = []

  const launch = (slot: Slot) => {
    slot.incarnation++
    slot.workerId = `w${slot.index}.${slot.incarnation}`
    slot.state = "running"
    const child = spawnNode(run, `worker-${slot.workerId}`, script, config(slot.index, slot.workerId))
    slot.child = child
    void child.exited.then(({ code, signal }) => {
      if (closing || slot.child !== child || slot.state === "killed") return
      unexpected.push(`${slot.workerId} exited (${signal ?? code}): ${child.logTail(3)}`)
      setTimeout(() => {
        if (!closing && slot.child === child) launch(slot)
      }, 1_000)
    })
  }

  for (let index = 1; index <= count; index++) {
    const slot = { index, incarnation: 0, workerId: "", state: "running" } as Slot
    launch(slot)
    slots.push(slot)
  }

  return {
    slots,
    kill: async (slot) => {
      slot.state = "killed"
      slot.child.signal("SIGKILL")
      await slot.child.exited
    },
    restart: (slot) => {
      if (!closing) launch(slot)
    },
    replace: async (slot) => {
      // Not an exit to restart after: this is the restart.
      slot.state = "killed"
      await stop(slot.child, 20_000)
      if (!closing) launch(slot)
    },
    pause: (slot) => {
      slot.state = "stopped"
      slot.child.signal("SIGSTOP")
    },
    resume: (slot) => {
      slot.child.signal("SIGCONT")
      if (slot.state === "stopped") slot.state = "running"
    },
    unexpectedExits: () => unexpected,
    shutdown: async () => {
      closing = true
      // The projector's shutdown deadline is 10 s; after that it is killed.
      await Promise.all(slots.map((slot) => stop(slot.child, 20_000)))
    }
  }
}
