/**
 * The outbox in memory, for logic that is not about SQL (the projector's leases, deadlines,
 * marks and shutdown, on `TestClock`): the same claim tokens, fences, per-key order, lease
 * expiries, retries and dead letters as the PostgreSQL queue, with time from Effect's
 * `Clock`. One process, no durability: a test double with the queue's semantics, not a store.
 */
import { ClaimMismatch, type InvalidInput, MessageMissing } from "@effect-durable/core/Errors"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as LeasedQueue from "../../LeasedQueue.js"
import { Defaults, type EnqueueOptions, type NewMessage } from "../../Outbox.js"
import type { MemoryRow } from "../../OutboxMemory.js"
import { type ClaimOptions, decodeTopics, type OutboxMessage } from "../../OutboxWorker.js"
import * as MemoryLimits from "./memoryLimits.js"
import { inFlightAt, iso, leaseRunning, open, type Row } from "./memoryRows.js"
import * as Prepare from "./prepare.js"
import {
  decodeError,
  decodeIds,
  decodeLease,
  decodeMovedBy,
  decodeReason,
  decodeRetryDelay,
  isMessageId
} from "./spec.js"
import { FAILURE_HISTORY } from "./worker.js"
import { decodeClaim } from "./worker.js"

export const make = (options: { readonly maxAttempts?: number } = {}) => {
  const rows = new Map<string, Row>()
  let nextId = 0
  const limits = MemoryLimits.make()

  // The PostgreSQL outbox's checks, limits and defaults: a message it refuses is refused here.
  const checks = {
    maxAttempts: options.maxAttempts ?? Defaults.maxAttempts,
    maxAttemptsByTopic: {},
    maxPayloadBytes: Defaults.maxPayloadBytes
  }
  const prepare = Prepare.make(checks)
  const prepareMany = Prepare.many(checks)

  type Prepared = Effect.Success<ReturnType<typeof prepare>>

  const enqueue = (topic: string, payload: unknown, enqueueOptions: EnqueueOptions = {}) =>
    Effect.flatMap(
      Effect.flatMap(Prepare.traceparent, (trace) => prepare(topic, payload, enqueueOptions, trace)),
      write
    )

  // Every message checked before the first is written: a bad one writes none (one statement on PostgreSQL).
  const enqueueMany = (messages: ReadonlyArray<NewMessage>) =>
    messages.length === 0 ? Effect.succeed([]) : Effect.flatMap(
      Effect.flatMap(Prepare.traceparent, (trace) => prepareMany(messages, trace)),
      (prepared) => Effect.forEach(prepared, write)
    )

  const write = Effect.fnUntraced(function*(message: Prepared) {
    const topic = message.topic
    // As stored: canonical JSON, read back.
    const json = JSON.parse(message.payload) as unknown
    const headers = JSON.parse(message.headers) as Record<string, string>
    const now = yield* Clock.currentTimeMillis
    const delay = message.delaySeconds * 1000
    const wait = (message.dueSeconds - message.delaySeconds) * 1000
    const dedupKey = message.dedupKey
    // The database's dedup rules (migration 15, `Outbox.enqueue`), on the in-memory rows.
    const holder = dedupKey === null
      ? undefined
      : [...rows.values()].find((row) => row.topic === topic && row.dedupKey === dedupKey && open(row))
    if (holder !== undefined) {
      const mode = message.dedupMode
      if (mode === "keep") return holder.id
      const delivering = holder.claimedUntil !== null && holder.claimedUntil > now
      if (!delivering) {
        if (mode === "replace") {
          holder.payload = json
          holder.headers = headers
          holder.availableAt = now + delay
          if (holder.orderingKey === null) holder.dueAt = now + delay + wait
        } else {
          if (holder.orderingKey === null) holder.dueAt += Math.max(now + delay - Math.max(holder.availableAt, now), 0)
          holder.availableAt = Math.max(holder.availableAt, now + delay)
        }
        holder.claimedUntil = null
        return holder.id
      }
      holder.dedupKey = null
    }
    const id = String(++nextId)
    rows.set(id, {
      id,
      topic,
      orderingKey: message.orderingKey,
      group: message.group === "" ? null : message.group,
      dedupKey,
      payload: json,
      headers,
      createdAt: now,
      maxAttempts: message.maxAttempts,
      availableAt: now + delay,
      // A keyed message is never due before its key's open messages ahead of it (as enqueue writes it).
      dueAt: Math.max(
        now + delay + wait,
        ...[...rows.values()].filter((row) =>
          message.orderingKey !== null && row.orderingKey === message.orderingKey && open(row)
        ).map((row) => row.dueAt)
      ),
      claimedBy: null,
      claimedUntil: null,
      generation: 0,
      attempts: 0,
      failureCount: 0,
      leaseExpiries: 0,
      projectedAt: null,
      deadAt: null,
      cancelledAt: null,
      cancelledBy: null,
      lastError: null,
      failures: []
    })
    return id
  })

  /**
   * Ready rows in due order (then id), of each ordering key its first open row and, with
   * `perKey`, the ready ones right behind it, the limit cutting runs breadth-first (the claim
   * function's rule), each within its topic's limits.
   */
  const claim = Effect.fnUntraced(function*(claimOptions: ClaimOptions) {
    const { leaseSeconds, limit, maxLeaseExpiries, perKey, worker } = yield* decodeClaim(claimOptions)
    // As the PostgreSQL claim decodes them (`null`: every topic).
    const topics = yield* decodeTopics(claimOptions.topics ?? null)
    const now = yield* Clock.currentTimeMillis
    const all = [...rows.values()].sort((a, b) => Number(a.id) - Number(b.id))
    const isReady = (row: Row) =>
      row.availableAt <= now && (row.claimedUntil === null || row.claimedUntil <= now) &&
      (topics === null || topics.includes(row.topic))
    const openOfKey = (key: string) => all.filter((row) => row.orderingKey === key && open(row))
    const heads = all.filter((row) =>
      open(row) && isReady(row) && (row.orderingKey === null || openOfKey(row.orderingKey)[0] === row)
    ).sort((a, b) => a.dueAt - b.dueAt || Number(a.id) - Number(b.id))
    const chosen = heads.map((row) => ({ row, position: 0 }))
    for (const head of heads) {
      if (head.orderingKey === null) continue
      const behind = openOfKey(head.orderingKey).slice(1, perKey)
      const run = behind.findIndex((row) => !isReady(row))
      for (const [i, row] of behind.slice(0, run === -1 ? behind.length : run).entries()) {
        chosen.push({ row, position: i + 1 })
      }
    }
    // Within the topics' limits (flow control): what is in flight is what holds a running lease.
    const inFlight = inFlightAt(all, now)
    // Every head is a candidate, the limit applied after the topics' limits: a limited topic
    // at its limit leaves the claim to the others (on PostgreSQL the limited topics are claimed
    // first, then the rest fills the claim).
    const ready = limits.admit(
      chosen
        .sort((a, b) => a.position - b.position || a.row.dueAt - b.row.dueAt || Number(a.row.id) - Number(b.row.id))
        .map(({ row }) => row),
      limit,
      inFlight,
      now
    ).sort((a, b) => Number(a.id) - Number(b.id))
    const claimed: Array<OutboxMessage> = []
    for (const row of ready) {
      const expired = row.claimedUntil !== null
      if (expired) row.leaseExpiries++
      if (expired && row.leaseExpiries >= maxLeaseExpiries) {
        row.claimedUntil = null
        row.deadAt = now
        row.lastError = [
          row.lastError,
          `dead: its lease ran out ${row.leaseExpiries} times (a worker died or stalled while delivering it)`
        ]
          .filter((part) => part !== null).join("; ")
        continue
      }
      row.claimedBy = worker
      row.claimedUntil = now + leaseSeconds * 1000
      row.generation++
      row.attempts++
      claimed.push({
        id: row.id,
        topic: row.topic,
        orderingKey: row.orderingKey,
        payload: row.payload,
        headers: row.headers,
        createdAt: iso(row.createdAt),
        attempt: row.attempts,
        claim: { messageId: row.id, worker, generation: row.generation }
      })
    }
    return claimed as ReadonlyArray<OutboxMessage>
  })

  const fenced = (claim: LeasedQueue.Claim): Row | undefined => {
    // Not a claim at all (null, a string): refused as PostgreSQL refuses it, never a TypeError.
    if (typeof claim !== "object" || claim === null) return undefined
    const row = rows.get(claim.messageId)
    return row !== undefined && row.claimedBy === claim.worker && row.generation === claim.generation &&
        row.claimedUntil !== null && open(row)
      ? row
      : undefined
  }

  /** Why a fenced write changed nothing: as the PostgreSQL queue explains it. */
  const refusal = (claim: LeasedQueue.Claim, completing: boolean): LeasedQueue.SettleFailure | undefined => {
    const malformed = typeof claim !== "object" || claim === null || !isMessageId(claim.messageId)
    const row = malformed ? undefined : rows.get(claim.messageId)
    if (!malformed && row === undefined) return new MessageMissing({ queue: "outbox", messageId: claim.messageId })
    if (
      completing && row !== undefined && row.projectedAt !== null && row.claimedBy === claim.worker &&
      row.generation === claim.generation
    ) {
      return undefined
    }
    return new ClaimMismatch({
      queue: "outbox",
      messageId: String(claim?.messageId),
      worker: String(claim?.worker),
      generation: typeof claim?.generation === "number" ? claim.generation : Number.NaN,
      // The holder of a cancelled message stops delivering it (as the renewal tells it on PostgreSQL).
      ...(row?.cancelledAt !== null && row?.cancelledAt !== undefined ? { cancelled: true } : {})
    })
  }

  const complete = (claim: LeasedQueue.Claim) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => {
      const row = fenced(claim)
      if (row !== undefined) {
        row.projectedAt = now
        row.claimedUntil = null
        row.lastError = null
        return Effect.void
      }
      const failure = refusal(claim, true)
      return failure === undefined ? Effect.void : Effect.fail(failure)
    })

  const completeMany = (claims: ReadonlyArray<LeasedQueue.Claim>) =>
    Effect.map(Effect.forEach(claims, (claim) => Effect.result(complete(claim))), (results) => ({
      completed: claims.filter((_, i) => results[i]!._tag === "Success").map((claim) => claim.messageId),
      rejected: results.flatMap((result) => result._tag === "Failure" ? [result.failure] : [])
    }))

  const release = (claim: LeasedQueue.Claim, releaseOptions: LeasedQueue.ReleaseOptions) =>
    Effect.gen(function*() {
      const error = yield* decodeError(releaseOptions.error)
      const retryDelay = yield* decodeRetryDelay(releaseOptions.retryDelay)
      const now = yield* Clock.currentTimeMillis
      const row = fenced(claim)
      if (row === undefined) return yield* Effect.fail(refusal(claim, false)!)
      const permanent = releaseOptions.permanent === true
      row.failureCount++
      row.failures = [...row.failures, {
        attempt: row.attempts,
        worker: row.claimedBy,
        at: iso(now),
        error: error.slice(0, 500)
      }]
        .slice(-FAILURE_HISTORY)
      row.claimedUntil = null
      row.availableAt = now + Duration.toMillis(retryDelay)
      const dead = permanent || row.failureCount >= row.maxAttempts
      row.deadAt = dead ? now : null
      row.lastError = permanent
        ? `${error} (dead: a permanent failure)`
        : dead
        ? `${error} (dead: ${row.failureCount} failed deliveries)`
        : error
      return { dead }
    })

  const renew = (
    claim: LeasedQueue.Claim,
    lease: Duration.Input
  ): Effect.Effect<void, LeasedQueue.SettleFailure | InvalidInput> =>
    Effect.gen(function*() {
      const decoded = yield* decodeLease(lease)
      const now = yield* Clock.currentTimeMillis
      const row = fenced(claim)
      if (row === undefined) return yield* Effect.fail(refusal(claim, false)!)
      row.claimedUntil = now + Duration.toMillis(decoded)
    })

  const many = (claims: ReadonlyArray<LeasedQueue.Claim>, apply: (row: Row) => void) =>
    Effect.sync((): LeasedQueue.ManyResult => {
      const applied: Array<string> = []
      const rejected: Array<LeasedQueue.SettleFailure> = []
      for (const claim of claims) {
        const row = fenced(claim)
        if (row === undefined) rejected.push(refusal(claim, false)!)
        else {
          apply(row)
          applied.push(row.id)
        }
      }
      return { applied, rejected }
    })

  const renewMany = (claims: ReadonlyArray<LeasedQueue.Claim>, lease: Duration.Input) =>
    Effect.gen(function*() {
      const decoded = yield* decodeLease(lease)
      const now = yield* Clock.currentTimeMillis
      return yield* many(claims, (row) => void (row.claimedUntil = now + Duration.toMillis(decoded)))
    })

  // Never delivered: the attempt its claim counted is taken back (migration 12).
  const giveBack = (claims: ReadonlyArray<LeasedQueue.Claim>, options: { readonly unstarted?: boolean } = {}) =>
    many(claims, (row) => {
      row.claimedUntil = null
      if (options.unstarted === true) row.attempts = Math.max(0, row.attempts - 1)
    })

  /**
   * Cancels open messages (waiting or being delivered): never delivered again, their keys move
   * on, a holder's next renewal or mark is refused as cancelled. Returns the ids cancelled and
   * those that were being delivered, as `OutboxAdmin.cancel` does.
   */
  const cancel = (ids: ReadonlyArray<string>, cancelOptions: { readonly reason?: string; readonly by?: string } = {}) =>
    Effect.gen(function*() {
      const reason = cancelOptions.reason === undefined ? undefined : yield* decodeReason(cancelOptions.reason)
      const by = (yield* decodeMovedBy(cancelOptions.by)) ?? "an operator"
      const found = yield* openRowsOf(ids)
      const now = yield* Clock.currentTimeMillis
      const cancelled: Array<string> = []
      const interrupted: Array<string> = []
      for (const row of found) {
        if (leaseRunning(row, now)) interrupted.push(row.id)
        cancelled.push(row.id)
        row.deadAt = now
        row.cancelledAt = now
        row.cancelledBy = by
        row.claimedUntil = null
        row.lastError = [row.lastError, `cancelled by ${by}${reason === undefined ? "" : `: ${reason}`}`]
          .filter((part) => part !== null).join("; ")
      }
      return { cancelled, interrupted }
    })

  /** How long until a ready message that only a rate holds back may be claimed (`OutboxWorker.rateWait`). */
  const rateWait = (topics?: ReadonlyArray<string>) =>
    Effect.flatMap(
      decodeTopics(topics ?? null),
      (only) => Effect.map(Clock.currentTimeMillis, (now) => limits.rateWait([...rows.values()], only, now))
    )

  /** `OutboxWorker.holds`: the claim's row, its lease running. */
  const holds = (claim: LeasedQueue.Claim) =>
    Effect.map(Clock.currentTimeMillis, (now) => (fenced(claim)?.claimedUntil ?? 0) > now)

  /** The open rows of `ids`, in id order: what `withdraw`, `waiting` and `cancel` act on. */
  const openRowsOf = (ids: ReadonlyArray<string>) =>
    Effect.map(
      decodeIds(ids),
      (decoded) =>
        [...new Set(decoded)].sort((a, b) => Number(a) - Number(b)).flatMap((id) => {
          const row = rows.get(id)
          return row !== undefined && open(row) ? [row] : []
        })
    )
  /** `Outbox.withdraw`: the open rows no worker holds, deleted. */
  const withdraw = (ids: ReadonlyArray<string>) =>
    Effect.map(
      openRowsOf(ids),
      (found) => found.filter((row) => row.claimedUntil === null && rows.delete(row.id)).map((row) => row.id)
    )
  const waiting = (ids: ReadonlyArray<string>) =>
    Effect.map(openRowsOf(ids), (found) => found.map((row) => ({ id: row.id, availableAt: iso(row.availableAt) })))

  /** Every row, in id order, as the table would show it. */
  const inspect = Effect.sync((): ReadonlyArray<MemoryRow> => [...rows.values()].map((row) => ({ ...row })))

  return {
    enqueue,
    enqueueMany,
    withdraw,
    waiting,
    claim,
    complete,
    completeMany,
    release,
    renew,
    renewMany,
    giveBack,
    cancel,
    rateWait,
    holds,
    setLimit: limits.setLimit,
    clearLimit: limits.clear,
    inspect
  }
}
