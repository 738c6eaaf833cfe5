/**
 * Every duplicate explained. A message delivered more than once was delivered again because
 * its earlier delivery's mark never landed: the holder was killed or frozen past its lease,
 * its connections were cut, or the server stopped. So each extra delivery must be tied to a
 * fault that hit one of the two deliveries' parties while the message was between them.
 *
 * For the deliveries of one message in time order, each consecutive pair (a, b) — b is the
 * extra one — is explained by a fault F (one that ran; a commit cut hits the producer only) when
 * - F touched the message: it hit the worker of a or of b (a kill or stall names its victim;
 *   a starve names every running worker; a terminate and a restart hit every worker), or the message was among those the
 *   parties F hit held when it struck (the fault's snapshot of claims); and
 * - F struck while the message was between the two deliveries: F began no later than b was
 *   recorded, and ended no earlier than one lease before a was recorded. The lease is the
 *   margin because a claim lives that long without a renewal: a delivery recorded up to one
 *   lease after a fault can still belong to a claim the fault hit (a worker whose renewal or
 *   mark failed carries on with what it had started), and one recorded later cannot.
 * Deliveries are recorded with the database clock and faults with the chaos process's
 * clock: one machine, one system clock, so they compare directly.
 *
 * Nothing else explains a duplicate: one that no fault explains is reported, and breaks the run.
 */
import type { FaultKind, FaultRecord } from "./faults.js"

export interface Delivery {
  readonly message_id: string
  readonly worker: string
  /** When the delivery was recorded, epoch ms (database clock). */
  readonly at: number
}

/** What the rule reads of a fault's record. */
export type Fault = Pick<FaultRecord, "kind" | "startedAt" | "endedAt" | "skipped" | "held" | "workers">

export interface Unexplained {
  readonly messageId: string
  readonly earlier: Delivery
  readonly extra: Delivery
}

export interface Explanation {
  /** Extra deliveries, each explained by the latest fault that explains it, counted by its kind. */
  readonly explainedBy: ReadonlyMap<FaultKind, number>
  readonly explained: number
  readonly unexplained: ReadonlyArray<Unexplained>
}

export const explain = (
  deliveries: ReadonlyArray<Delivery>,
  faults: ReadonlyArray<Fault>,
  leaseMillis: number
): Explanation => {
  const byMessage = new Map<string, Array<Delivery>>()
  for (const delivery of deliveries) {
    const list = byMessage.get(delivery.message_id)
    if (list === undefined) byMessage.set(delivery.message_id, [delivery])
    else list.push(delivery)
  }
  const relevant = faults
    .filter((fault) => !fault.skipped && fault.kind !== "commit-cut")
    .map((fault) => ({ fault, held: new Set(fault.held) }))
    .sort((x, y) => x.fault.startedAt - y.fault.startedAt)
  const hits = (fault: Fault, worker: string) => fault.workers === "all" || fault.workers.includes(worker)

  const explainedBy = new Map<FaultKind, number>()
  const unexplained: Array<Unexplained> = []
  let explained = 0
  for (const [messageId, list] of byMessage) {
    if (list.length < 2) continue
    list.sort((x, y) => x.at - y.at)
    for (let i = 1; i < list.length; i++) {
      const earlier = list[i - 1]!
      const extra = list[i]!
      let found: Fault | undefined
      for (const { fault, held } of relevant) {
        if (fault.startedAt > extra.at) break
        if (fault.endedAt < earlier.at - leaseMillis) continue
        if (held.has(messageId) || hits(fault, earlier.worker) || hits(fault, extra.worker)) found = fault
      }
      if (found === undefined) unexplained.push({ messageId, earlier, extra })
      else {
        explained++
        explainedBy.set(found.kind, (explainedBy.get(found.kind) ?? 0) + 1)
      }
    }
  }
  return { explainedBy, explained, unexplained }
}
