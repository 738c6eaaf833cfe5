/**
 * The feed schedule's checker: what every consumer applied, against what the writers were
 * told and what the outbox holds. Every committed message is applied exactly once by every
 * consumer, all of them in the same total order (position, then id), no aborted message is
 * ever applied, and a message whose writer never heard back is applied by all or by none; the
 * relay's stream holds every committed message once, in commit order (`relayChecker.ts`).
 */
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import { readFileSync } from "node:fs"
import { checkRelay } from "./relayChecker.js"
import { CONSUMERS, type JournalLine, TOPIC } from "./schema.js"

export interface Report {
  readonly details: ReadonlyArray<string>
  readonly broken: ReadonlyArray<string>
  readonly summary: string
}

export const journalOf = (paths: ReadonlyArray<string>) => {
  const last = new Map<string, JournalLine>()
  const begun = new Map<string, JournalLine>()
  for (const path of paths) {
    let text: string
    try {
      text = readFileSync(path, "utf8")
    } catch {
      continue
    }
    for (const line of text.split("\n")) {
      if (line.trim() === "") continue
      const entry = JSON.parse(line) as JournalLine
      if (entry.state === "begin") begun.set(entry.uid, entry)
      else last.set(entry.uid, entry)
    }
  }
  const outcome = (uid: string) => last.get(uid)?.state ?? "unknown"
  return { begun, last, outcome }
}

export const check = (
  admin: SqlClient.SqlClient,
  input: {
    readonly journals: ReadonlyArray<string>
    readonly faults: ReadonlyArray<string>
    readonly incomplete: ReadonlyArray<string>
    /** The relay's JetStream stream, in its order. */
    readonly stream: ReadonlyArray<{ readonly uid: string; readonly id: string }>
  }
) =>
  Effect.gen(function*() {
    const broken: Array<string> = [...input.incomplete]
    const journal = journalOf(input.journals)
    const messages = yield* admin<{ id: string; uid: string; position: string }>`
      SELECT id::text AS id, payload->>'uid' AS uid, feed_position::text AS position
        FROM durable.outbox_messages WHERE topic = ${TOPIC} ORDER BY feed_position, id`
    const order = messages.map((m) => m.id)
    const inOutbox = new Set(messages.map((m) => m.uid))
    const uids = [...journal.begun.keys()]
    const committed = uids.filter((uid) => journal.outcome(uid) === "committed")
    const aborted = uids.filter((uid) => journal.outcome(uid) === "aborted")
    const unknown = uids.filter((uid) => journal.outcome(uid) === "unknown")
    const lost = committed.filter((uid) => !inOutbox.has(uid))
    if (lost.length > 0) broken.push(`${lost.length} committed messages missing from the outbox (first ${lost[0]})`)
    const ghosts = aborted.filter((uid) => inOutbox.has(uid))
    if (ghosts.length > 0) broken.push(`${ghosts.length} rolled-back messages in the outbox (first ${ghosts[0]})`)
    const strangers = messages.filter((m) => !journal.begun.has(m.uid))
    if (strangers.length > 0) broken.push(`${strangers.length} messages no writer began`)

    // Late commits: a message whose commit was acknowledged after that of a message with a
    // later position (it became visible behind a message a reader could already have read).
    const ackOf = (uid: string) => journal.last.get(uid)?.state === "committed" ? journal.last.get(uid)!.at : Infinity
    let later = Infinity
    let late = 0
    for (let i = messages.length - 1; i >= 0; i--) {
      const ack = ackOf(messages[i]!.uid)
      if (ack > later) late++
      later = Math.min(later, ack)
    }

    const details: Array<string> = [
      `writers: ${uids.length} transactions begun: ${committed.length} committed, ${aborted.length} rolled back on purpose, ${unknown.length} without an answer (killed, or cut by a restart); ${
        [...journal.begun.values()].filter((b) => (b.delay ?? 0) > 0).length
      } held open 0.1-2 s after their enqueue`,
      `outbox: ${messages.length} messages on ${TOPIC}; ${late} committed after a message with a later position had committed (each one a message a reader moving past what it has seen would skip)`,
      ...input.faults.map((fault) => `fault: ${fault}`)
    ]
    const applied = yield* admin<{ consumer: string; message_id: string; uid: string }>`
      SELECT consumer, message_id::text AS message_id, uid FROM chaos_feed.applied ORDER BY seq`
    const aborts = new Set(aborted)
    for (const consumer of CONSUMERS) {
      const mine = applied.filter((row) => row.consumer === consumer)
      const ids = mine.map((row) => row.message_id)
      const twice = ids.length - new Set(ids).size
      if (twice > 0) broken.push(`${consumer}: ${twice} messages applied more than once`)
      const abortedRead = mine.filter((row) => aborts.has(row.uid)).length
      if (abortedRead > 0) broken.push(`${consumer}: ${abortedRead} rolled-back messages applied`)
      const firstDifference = order.findIndex((id, i) => ids[i] !== id)
      if (ids.length !== order.length || firstDifference !== -1) {
        broken.push(
          `${consumer}: applied ${ids.length} messages of ${order.length}, not in the feed's order (first difference at ${
            firstDifference === -1 ? order.length : firstDifference
          })`
        )
      }
      details.push(
        `consumer ${consumer}: ${ids.length} applied, ${twice} twice, in the feed's order: ${
          firstDifference === -1 && ids.length === order.length
        }`
      )
    }
    const relay = checkRelay(input.stream, journal)
    details.push(...relay.details)
    broken.push(...relay.broken)
    const summary =
      `feed chaos: ${messages.length} messages (${late} late commits), ${CONSUMERS.length} consumers, a relay (${relay.overtaken} published ahead of a lower id), ${input.faults.length} faults, ${
        broken.length === 0
          ? "every message read once by every consumer in one order and published once in commit order, none lost, none rolled back read"
          : `${broken.length} invariants broken`
      }`
    return { details, broken, summary } satisfies Report
  })
