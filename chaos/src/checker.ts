/**
 * The checker: reads every message, delivery and effect of a finished run and holds them to
 * the guarantees, message by message (never by counts alone):
 * - committed ⊆ delivered, and everything the producer was told committed is committed;
 * - rolled back ∩ delivered = ∅ (no phantom), and nothing delivered that never committed;
 * - no committed message dead (the handler never fails on its own);
 * - every committed message's effect applied exactly once (an inbox receipt, one effect row);
 * - one business row per idempotency key, one outbox message per command;
 * - duplicates counted, each one explained by a fault (duplicates.ts); for each fault, the
 *   time until delivery recovered.
 */
import * as QueueLifecycle from "@effect-durable/pg/QueueLifecycle"
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import { readFileSync } from "node:fs"
import * as Duplicates from "./duplicates.js"
import type { FaultRecord } from "./faults.js"
import { CONSUMER, type JournalEntry, OPERATION, SUBJECT, TOPIC } from "./schema.js"

export interface Report {
  readonly committed: number
  readonly delivered: number
  readonly lost: number
  readonly phantom: number
  readonly dead: number
  readonly duplicates: number
  readonly maxRecoverySeconds: number
  /** Lines to print above the summary. */
  readonly details: ReadonlyArray<string>
  /** Every invariant that broke, with its count; empty when the run is clean. */
  readonly broken: ReadonlyArray<string>
}

export interface RunFacts {
  readonly journal: string
  readonly productionStartedAt: number
  readonly faults: ReadonlyArray<FaultRecord>
  /** The workers' lease: how long a claim a fault hit can still be delivered from. */
  readonly leaseMillis: number
  readonly unexpectedExits: ReadonlyArray<string>
  /** Why the run did not finish normally (producer failed, drain timed out), if it did not. */
  readonly incomplete: ReadonlyArray<string>
  /** The workflow schedule's rolling deploy (`--deploy`): how many runners went from code A to B. */
  readonly deployed?: number
}

const percent = (part: number, whole: number) => whole === 0 ? "0.0" : ((100 * part) / whole).toFixed(1)
const sample = (items: Iterable<string>, n = 5) => {
  const list = [...items]
  return list.length <= n ? list.join(", ") : `${list.slice(0, n).join(", ")}, … (${list.length})`
}

const readJournal = (path: string): Array<JournalEntry> => {
  try {
    return readFileSync(path, "utf8").split("\n").filter((line) => line.length > 0).map((line) => JSON.parse(line))
  } catch {
    return []
  }
}

export const check = (admin: SqlClient.SqlClient, facts: RunFacts): Effect.Effect<Report, unknown> =>
  Effect.gen(function*() {
    const orders = yield* admin<{ key: string; uid: string; n: number }>`
      SELECT key, uid, count(*)::int AS n FROM chaos.orders GROUP BY key, uid`
    const rolledBackRows = yield* admin<{ uid: string }>`SELECT DISTINCT uid FROM chaos.rolled_back`
    const outbox = yield* admin<{
      id: string
      uid: string
      ordering_key: string | null
      projected: boolean
      dead: boolean
      last_error: string | null
      attempts: number
      failures: number
      lease_expiries: number
    }>`
      SELECT id::text AS id, payload->>'uid' AS uid, ordering_key,
             ${admin.literal(QueueLifecycle.outbox.is.done)} AS projected, ${
      admin.literal(QueueLifecycle.outbox.is.dead)
    } AS dead, last_error, attempt_count AS attempts,
             failure_count AS failures, lease_expiries
        FROM durable.outbox_messages WHERE topic = ${TOPIC}`
    const deliveries = yield* admin<{ message_id: string; uid: string; worker: string; at: number }>`
      SELECT message_id::text AS message_id, uid, worker, extract(epoch FROM at)::float8 * 1000 AS at
        FROM chaos.deliveries ORDER BY at`
    const effects = yield* admin<
      { uid: string; n: number }
    >`SELECT uid, count(*)::int AS n FROM chaos.effects GROUP BY uid`
    const receipts = yield* admin<{ message_id: string }>`
      SELECT message_id FROM durable.inbox WHERE consumer = ${CONSUMER}`
    const records = yield* admin<{ key: string }>`
      SELECT key FROM durable.mutation_records WHERE subject = ${SUBJECT} AND operation = ${OPERATION}`
    const journal = readJournal(facts.journal)

    const broken: Array<string> = [...facts.incomplete]
    const details: Array<string> = []

    // What committed: the business rows (the database's word), held to the journal (the
    // producer's word, which survives whatever the database loses).
    const committed = new Set(orders.map((row) => row.uid))
    const rowsPerKey = new Map<string, number>()
    for (const row of orders) rowsPerKey.set(row.key, (rowsPerKey.get(row.key) ?? 0) + row.n)
    const doubledKeys = [...rowsPerKey].filter(([, n]) => n > 1).map(([key]) => key)
    const recorded = new Set(records.map((row) => row.key))
    const unrecorded = [...rowsPerKey.keys()].filter((key) => !recorded.has(key))
    const rolledBack = new Set(rolledBackRows.map((row) => row.uid))
    const ackedMissing = journal.filter((entry) => entry.outcome !== "RolledBack" && !committed.has(entry.uid))
    const rolledBackCommitted = journal.filter((entry) => entry.outcome === "RolledBack" && committed.has(entry.uid))
    const journalRolledBackUnrecorded = journal.filter((entry) =>
      entry.outcome === "RolledBack" && !rolledBack.has(entry.uid)
    )

    const outboxByUid = new Map<string, Array<typeof outbox[number]>>()
    for (const row of outbox) outboxByUid.set(row.uid, [...(outboxByUid.get(row.uid) ?? []), row])
    const withoutMessage = [...committed].filter((uid) => !outboxByUid.has(uid))
    const enqueuedTwice = [...outboxByUid].filter(([, rows]) => rows.length > 1).map(([uid]) => uid)
    const messagesNotCommitted = [...outboxByUid.keys()].filter((uid) => !committed.has(uid))

    const deliveredUids = new Set(deliveries.map((row) => row.uid))
    const timesByMessage = new Map<string, Array<number>>()
    for (const row of deliveries) {
      timesByMessage.set(row.message_id, [...(timesByMessage.get(row.message_id) ?? []), row.at])
    }
    const phantomDeliveries = [...deliveredUids].filter((uid) => !committed.has(uid))
    const rolledBackDelivered = [...deliveredUids].filter((uid) => rolledBack.has(uid))

    const effectCount = new Map(effects.map((row) => [row.uid, row.n] as const))
    // A projected message is settled: its effect must be there (an open one may still get it).
    const projectedUids = new Set(outbox.filter((row) => row.projected).map((row) => row.uid))
    const effectMissing = [...committed].filter((uid) => (effectCount.get(uid) ?? 0) === 0 && projectedUids.has(uid))
    const effectTwice = [...committed].filter((uid) => (effectCount.get(uid) ?? 0) > 1)
    const phantomEffects = [...effectCount.keys()].filter((uid) => !committed.has(uid))
    const receiptIds = new Set(receipts.map((row) => row.message_id))
    const committedMessages = outbox.filter((row) => committed.has(row.uid))
    const receiptWithoutEffect = committedMessages.filter((row) => receiptIds.has(row.id) && !effectCount.has(row.uid))

    const deadMessages = committedMessages.filter((row) => row.dead)
    const open = committedMessages.filter((row) => !row.projected && !row.dead)
    // Undelivered and still open (the drain ran out of time) is pending, not lost: it would
    // still be delivered. Lost is what never will be: settled without a delivery, or gone.
    const openUids = new Set(open.map((row) => row.uid))
    const undelivered = [...committed].filter((uid) => !deliveredUids.has(uid))
    const pending = undelivered.filter((uid) => openUids.has(uid))
    const neverDelivered = undelivered.filter((uid) => !openUids.has(uid))

    const lost = new Set([...neverDelivered, ...ackedMissing.map((entry) => entry.uid), ...withoutMessage])
    const phantom = new Set([...phantomDeliveries, ...phantomEffects])
    const duplicates = deliveries.length - timesByMessage.size

    // Per-key order: a keyed message is first delivered only after every earlier message of its
    // key was delivered (a late duplicate of an earlier one, from a frozen holder, may come after).
    const firstDelivery = new Map<string, number>()
    for (const [id, times] of timesByMessage) firstDelivery.set(id, Math.min(...times))
    const byKey = new Map<string, Array<{ readonly id: bigint; readonly first: number | undefined }>>()
    for (const row of committedMessages) {
      if (row.ordering_key === null || row.dead) continue
      byKey.set(row.ordering_key, [
        ...(byKey.get(row.ordering_key) ?? []),
        { id: BigInt(row.id), first: firstDelivery.get(row.id) }
      ])
    }
    let keyedMessages = 0
    const outOfOrder: Array<string> = []
    for (const [key, rows] of byKey) {
      rows.sort((a, b) => (a.id < b.id ? -1 : 1))
      keyedMessages += rows.length
      for (let i = 1; i < rows.length; i++) {
        const before = rows[i - 1]!.first
        const after = rows[i]!.first
        if (after !== undefined && (before === undefined || after < before)) {
          outOfOrder.push(`${key}: ${rows[i]!.id} before ${rows[i - 1]!.id}`)
        }
      }
    }
    details.push(
      `per-key order: ${keyedMessages} keyed messages over ${byKey.size} keys, ${outOfOrder.length} first delivered before an earlier one of their key${
        outOfOrder.length === 0 ? "" : ` (${sample(outOfOrder)})`
      }`
    )
    if (outOfOrder.length > 0) broken.push(`per-key order broken ${outOfOrder.length}`)

    if (lost.size > 0) broken.push(`lost ${lost.size}`)
    if (pending.length > 0) broken.push(`undelivered when the drain ended ${pending.length}`)
    if (phantom.size > 0) broken.push(`phantom ${phantom.size}`)
    if (deadMessages.length > 0) broken.push(`dead ${deadMessages.length}`)
    if (effectMissing.length + effectTwice.length > 0) {
      broken.push(`effect not exactly once ${effectMissing.length + effectTwice.length}`)
    }
    if (doubledKeys.length > 0) broken.push(`business rows doubled ${doubledKeys.length}`)
    if (enqueuedTwice.length > 0) broken.push(`messages enqueued twice ${enqueuedTwice.length}`)
    if (messagesNotCommitted.length > 0) {
      broken.push(`messages without a committed command ${messagesNotCommitted.length}`)
    }
    if (rolledBackCommitted.length > 0) broken.push(`rolled back yet committed ${rolledBackCommitted.length}`)
    if (unrecorded.length > 0) broken.push(`commands without a ledger record ${unrecorded.length}`)
    if (receiptWithoutEffect.length > 0) {
      broken.push(`inbox receipts without their effect ${receiptWithoutEffect.length}`)
    }

    // Faults and how long each took to recover from: until every message the parties it hit
    // held was delivered again; after a database fault, also until deliveries resumed; after
    // a commit cut, until the producer's retry was answered.
    const deliveryTimes = deliveries.map((row) => row.at)
    const answeredAfterRetry = journal.filter((entry) => entry.retries > 0).map((entry) => entry.at).sort((a, b) =>
      a - b
    )
    const firstAtOrAfter = (times: ReadonlyArray<number>, t: number) => {
      let low = 0
      let high = times.length
      while (low < high) {
        const mid = (low + high) >> 1
        if (times[mid]! < t) low = mid + 1
        else high = mid
      }
      return times[low]
    }
    const recoveryOf = (fault: FaultRecord): number => {
      if (fault.kind === "commit-cut") {
        const answered = firstAtOrAfter(answeredAfterRetry, fault.startedAt)
        return answered === undefined ? 0 : answered - fault.startedAt
      }
      let recovery = 0
      for (const id of fault.held) {
        const next = firstAtOrAfter(timesByMessage.get(id) ?? [], fault.startedAt)
        if (next !== undefined) recovery = Math.max(recovery, next - fault.startedAt)
      }
      if (fault.kind === "terminate" || fault.kind === "restart" || fault.kind === "starve") {
        const resumed = firstAtOrAfter(deliveryTimes, fault.endedAt)
        if (resumed !== undefined) recovery = Math.max(recovery, resumed - fault.startedAt)
      }
      return recovery
    }
    const recoveries: Array<number> = []
    details.push(
      `faults (${facts.faults.filter((fault) => !fault.skipped).length} run, ${
        facts.faults.filter((fault) => fault.skipped).length
      } skipped):`
    )
    for (const fault of facts.faults) {
      const at = `${((fault.startedAt - facts.productionStartedAt) / 1000).toFixed(1).padStart(6)} s  ${
        fault.kind.padEnd(10)
      }`
      if (fault.skipped) {
        details.push(`  ${at} skipped: ${fault.detail}`)
        continue
      }
      const recovery = recoveryOf(fault)
      recoveries.push(recovery)
      // Held messages delivered more than once: what this fault cost in duplicates.
      const again = fault.held.filter((id) => (timesByMessage.get(id)?.length ?? 0) > 1).length
      details.push(
        `  ${at} ${fault.detail}; ${fault.kind === "commit-cut" ? "retry answered" : "delivery recovered"} in ${
          (recovery / 1000).toFixed(1)
        } s${fault.held.length > 0 ? `, ${again} of those held delivered more than once` : ""}`
      )
    }
    const maxRecoverySeconds = recoveries.length === 0 ? 0 : Math.max(...recoveries) / 1000

    // Every duplicate explained (duplicates.ts): each extra delivery is tied to a fault that
    // hit one of its two deliveries' parties while the message was between them.
    const explanation = Duplicates.explain(deliveries, facts.faults, facts.leaseMillis)
    const { explainedBy, unexplained } = explanation
    details.push(
      `duplicates explained: ${explanation.explained} of ${duplicates}${
        explainedBy.size === 0 ? "" : ` (${[...explainedBy].map(([kind, n]) => `${kind} ${n}`).join(", ")})`
      }, unexplained ${unexplained.length}`
    )
    for (const { earlier, extra, messageId } of unexplained.slice(0, 10)) {
      const at = (t: number) => `${((t - facts.productionStartedAt) / 1000).toFixed(2)} s`
      details.push(
        `  UNEXPLAINED message ${messageId}: delivered by ${earlier.worker} at ${
          at(earlier.at)
        }, again by ${extra.worker} at ${at(extra.at)}`
      )
    }
    if (unexplained.length > 0) broken.push(`duplicates no fault explains ${unexplained.length}`)

    // The producer's side.
    const outcomes = { First: 0, Replay: 0, RolledBack: 0 }
    for (const entry of journal) outcomes[entry.outcome]++
    const retried = journal.filter((entry) => entry.retries > 0)
    const retriedReplay = retried.filter((entry) => entry.outcome === "Replay").length
    const retriedFirst = retried.filter((entry) => entry.outcome === "First").length
    details.push(
      `producer: ${journal.length} commands answered: First ${outcomes.First}, Replay ${outcomes.Replay}, rolled back on purpose ${outcomes.RolledBack} (${rolledBack.size} recorded)`
    )
    const errorKinds = new Map<string, number>()
    for (const entry of retried) {
      const kind = (entry.errors[0] ?? "?").replace(/\d+/g, "N").slice(0, 90)
      errorKinds.set(kind, (errorKinds.get(kind) ?? 0) + 1)
    }
    details.push(
      `  retried ${retried.length} commands after a failure: the earlier attempt had committed (Replay) ${retriedReplay}, had not (First) ${retriedFirst}; ` +
        `one business row per key: ${doubledKeys.length === 0 ? "yes" : `NO (${sample(doubledKeys)})`}`
    )
    for (const [kind, n] of [...errorKinds].sort((a, b) => b[1] - a[1]).slice(0, 4)) details.push(`    ${n} × ${kind}`)

    // The workers' side.
    const byWorker = new Map<string, number>()
    for (const row of deliveries) byWorker.set(row.worker, (byWorker.get(row.worker) ?? 0) + 1)
    details.push(
      `deliveries: ${deliveries.length} of ${timesByMessage.size} messages; by worker: ${
        [...byWorker].sort().map(([w, n]) => `${w} ${n}`).join(", ")
      }`
    )
    const attemptsHistogram = new Map<string, number>()
    for (const row of committedMessages) {
      const bucket = row.attempts <= 1
        ? "1"
        : row.attempts <= 2
        ? "2"
        : row.attempts <= 5
        ? "3-5"
        : row.attempts <= 10
        ? "6-10"
        : ">10"
      attemptsHistogram.set(bucket, (attemptsHistogram.get(bucket) ?? 0) + 1)
    }
    const most = (values: ReadonlyArray<number>) => values.reduce((a, b) => Math.max(a, b), 0)
    details.push(
      `  claims per message: ${
        ["1", "2", "3-5", "6-10", ">10"].map((b) => `${b}: ${attemptsHistogram.get(b) ?? 0}`).join(", ")
      }; max ${most(committedMessages.map((row) => row.attempts))}; most failed deliveries of one message ${
        most(committedMessages.map((row) => row.failures))
      }, most lost leases ${most(committedMessages.map((row) => row.lease_expiries))}`
    )
    if (facts.unexpectedExits.length > 0) {
      details.push(`  workers that exited on their own (restarted): ${facts.unexpectedExits.length}`)
      for (const line of facts.unexpectedExits.slice(0, 3)) {
        details.push(`    ${line.replace(/\n/g, " | ").slice(0, 300)}`)
      }
    }
    if (deadMessages.length > 0) {
      const reasons = new Map<string, number>()
      for (const row of deadMessages) {
        const reason = (row.last_error ?? "?").replace(/\d+/g, "N").slice(0, 100)
        reasons.set(reason, (reasons.get(reason) ?? 0) + 1)
      }
      const deliveredDead = deadMessages.filter((row) => deliveredUids.has(row.uid)).length
      details.push(
        `dead: ${deadMessages.length} committed messages (${deliveredDead} of them had been delivered), e.g. ${
          sample(deadMessages.map((row) => row.id))
        }`
      )
      for (const [reason, n] of [...reasons].sort((a, b) => b[1] - a[1]).slice(0, 4)) {
        details.push(`    ${n} × ${reason}`)
      }
    }
    if (open.length > 0) {
      details.push(
        `left open (neither projected nor dead): ${open.length}, of them never delivered ${pending.length}, e.g. ${
          sample(open.map((row) => row.id))
        }`
      )
    }
    if (lost.size > 0) {
      details.push(
        `lost: ${
          sample(lost)
        } (settled without a delivery ${neverDelivered.length}, acknowledged but not in the database ${ackedMissing.length}, committed without a message ${withoutMessage.length})`
      )
    }
    if (phantom.size > 0) {
      details.push(`phantom: ${sample(phantom)} (of them rolled back on purpose: ${rolledBackDelivered.length})`)
    }
    if (effectMissing.length + effectTwice.length > 0) {
      details.push(
        `effects: missing for ${effectMissing.length} (${
          sample(effectMissing)
        }), applied more than once for ${effectTwice.length} (${sample(effectTwice)})`
      )
    } else {
      const settled = [...committed].filter((uid) => projectedUids.has(uid)).length
      details.push(
        `effects: exactly once for each of the ${settled} committed messages projected; rolled back messages delivered: ${rolledBackDelivered.length}`
      )
    }
    if (journalRolledBackUnrecorded.length > 0) {
      details.push(`note: ${journalRolledBackUnrecorded.length} rollbacks journaled but not recorded`)
    }

    return {
      committed: committed.size,
      delivered: [...deliveredUids].filter((uid) => committed.has(uid)).length,
      lost: lost.size,
      phantom: phantom.size,
      dead: deadMessages.length,
      duplicates,
      maxRecoverySeconds,
      details,
      broken
    }
  })

/** The one summary line. */
export const summary = (report: Report): string =>
  `committed ${report.committed}, delivered ${report.delivered}, lost ${report.lost}, phantom ${report.phantom}, ` +
  `dead ${report.dead}, duplicates ${report.duplicates} (${percent(report.duplicates, report.delivered)}%), ` +
  `max recovery ${report.maxRecoverySeconds.toFixed(1)} s`
