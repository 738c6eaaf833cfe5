/**
 * The relay's part of the feed schedule's checker: the JetStream stream, in its order, against
 * what the writers were told. Every committed message is in the stream exactly once, no
 * rolled-back one is, and the stream keeps commit order: a message whose commit a writer saw
 * acknowledged before another transaction began comes before that transaction's message.
 */
import type { JournalLine } from "./schema.js"

export interface RelayReport {
  readonly details: ReadonlyArray<string>
  readonly broken: ReadonlyArray<string>
  /** Messages the stream holds after one with a higher id (what a relay by id would reorder or skip). */
  readonly overtaken: number
}

export const checkRelay = (
  /** The stream's messages in its order: each one's uid and outbox id. */
  stream: ReadonlyArray<{ readonly uid: string; readonly id: string }>,
  journal: {
    readonly begun: ReadonlyMap<string, JournalLine>
    readonly last: ReadonlyMap<string, JournalLine>
  }
): RelayReport => {
  const broken: Array<string> = []
  const outcome = (uid: string) => journal.last.get(uid)?.state ?? "unknown"
  const index = new Map<string, number>()
  let twice = 0
  for (const [i, message] of stream.entries()) {
    if (index.has(message.uid)) twice++
    else index.set(message.uid, i)
  }
  if (twice > 0) broken.push(`relay: ${twice} messages in the stream more than once`)
  const uids = [...journal.begun.keys()]
  const committed = uids.filter((uid) => outcome(uid) === "committed")
  const missing = committed.filter((uid) => !index.has(uid))
  if (missing.length > 0) {
    broken.push(`relay: ${missing.length} committed messages not in the stream (first ${missing[0]})`)
  }
  const ghosts = uids.filter((uid) => outcome(uid) === "aborted" && index.has(uid))
  if (ghosts.length > 0) broken.push(`relay: ${ghosts.length} rolled-back messages in the stream (first ${ghosts[0]})`)
  const strangers = stream.filter((message) => !journal.begun.has(message.uid))
  if (strangers.length > 0) broken.push(`relay: ${strangers.length} messages in the stream no writer began`)

  // Commit order, as far as the writers' clocks can tell: A's commit acknowledged before B's
  // transaction began means A committed first, so A must come first in the stream.
  const acks = committed
    .filter((uid) => index.has(uid))
    .map((uid) => ({ at: journal.last.get(uid)!.at, position: index.get(uid)! }))
    .sort((a, b) => a.at - b.at)
  // The highest stream position among the messages acknowledged up to each ack time.
  const highest: Array<number> = []
  for (const [i, ack] of acks.entries()) highest.push(Math.max(ack.position, i === 0 ? -1 : highest[i - 1]!))
  const highestAckedBefore = (time: number) => {
    let low = 0
    let high = acks.length
    while (low < high) {
      const middle = (low + high) >> 1
      if (acks[middle]!.at < time) low = middle + 1
      else high = middle
    }
    return low === 0 ? -1 : highest[low - 1]!
  }
  const outOfOrder = committed.filter((uid) =>
    index.has(uid) && highestAckedBefore(journal.begun.get(uid)!.at) > index.get(uid)!
  )
  if (outOfOrder.length > 0) {
    broken.push(
      `relay: ${outOfOrder.length} messages in the stream before one whose commit was acknowledged before they began (first ${
        outOfOrder[0]
      })`
    )
  }
  let overtaken = 0
  let highestId = -1n
  for (const message of stream) {
    const id = BigInt(message.id)
    if (id < highestId) overtaken++
    else highestId = id
  }
  const details = [
    `relay: ${stream.length} messages in the stream, ${twice} twice, ${missing.length} committed ones missing; ${overtaken} after a message with a higher id (commit order, not id order); commit order kept: ${
      outOfOrder.length === 0
    }`
  ]
  return { details, broken, overtaken }
}
