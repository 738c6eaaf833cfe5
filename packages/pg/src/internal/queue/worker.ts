/**
 * The worker half of a leased queue, shared by the outbox and the stored inbox: claim with
 * `FOR UPDATE SKIP LOCKED` and a lease on the database clock, then fenced completion,
 * release (retry later or dead letter) and lease renewal. A claim token is (row id, worker,
 * claim generation); every write of a claimed row checks all three, so a worker whose lease
 * was lost and whose row was claimed again can change nothing.
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import { printable } from "@effect-durable/core/Printable"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Result from "effect/Result"
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import type { Settings } from "../../DurableConfig.js"
import { classifySqlErrors } from "../../ErrorClassification.js"
import {
  type Claim,
  type CompleteManyResult,
  Defaults,
  type ManyResult,
  type ReleaseOptions,
  type SettleFailure
} from "../../LeasedQueue.js"
import { type Bounded, boundedStatement } from "../oneRoundTrip.js"
import { bounded } from "../transaction.js"
import * as Lifecycle from "./lifecycle.js"
import * as Moves from "./moves.js"
import * as Settle from "./settle.js"
import {
  decodeError,
  decodeLease,
  decodeLimit,
  decodeMaxLeaseExpiries,
  decodePerKey,
  decodeRetryDelay,
  decodeWorker,
  isMessageId,
  MAX_BATCH,
  type QueueSpec
} from "./spec.js"

/** Rows a claim sent to the dead letters for their leases that ran out, by queue. */
const exhaustedTotal = Metric.counter("effect_durable_lease_exhausted_total", {
  description: "messages a claim sent to the dead letters because their lease ran out once too often"
})

/** How many failed deliveries a row's `failures` history keeps (the newest). */
export const FAILURE_HISTORY = Settle.FAILURE_HISTORY

/** Ascending order of decimal ids (no leading zeros): shorter is smaller, then by text. */
const byId = (a: { readonly id: string }, b: { readonly id: string }) =>
  a.id.length - b.id.length || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

/** `rows` in id order; they usually come back so (the primary key's order), then no sort is paid. */
export const inIdOrder = <Row extends { readonly id: string }>(rows: Array<Row>): Array<Row> => {
  for (let i = 1; i < rows.length; i++) if (byId(rows[i - 1]!, rows[i]!) > 0) return rows.sort(byId)
  return rows
}

export interface ClaimOptions {
  readonly worker: string
  readonly limit: number
  readonly lease: Duration.Input
  /** Leases a row may lose before it is dead; default `Defaults.maxLeaseExpiries`. */
  readonly maxLeaseExpiries?: number
  /** The most messages of one ordering key a claim takes (a keyed run, in id order); default 1. */
  readonly perKey?: number
}

/** The decoded claim options: the lease in seconds, as the claim function takes it. */
export interface ClaimArguments {
  readonly worker: string
  readonly limit: number
  readonly leaseSeconds: number
  readonly maxLeaseExpiries: number
  readonly perKey: number
}

/** Decodes a claim's options (what `claim` and `explainClaim` take). */
export const decodeClaim = (options: ClaimOptions): Effect.Effect<ClaimArguments, InvalidInput> =>
  Effect.gen(function*() {
    const worker = yield* decodeWorker(options.worker)
    const limit = yield* decodeLimit(options.limit)
    const lease = yield* decodeLease(options.lease)
    const maxLeaseExpiries = yield* decodeMaxLeaseExpiries(options.maxLeaseExpiries ?? Defaults.maxLeaseExpiries)
    const perKey = yield* decodePerKey(options.perKey ?? 1)
    return { worker, limit, leaseSeconds: Duration.toMillis(lease) / 1000, maxLeaseExpiries, perKey }
  })

/** What a settle operation found when its fenced update changed no row. */
interface RowState {
  readonly id: string
  readonly claimed_by: string | null
  readonly claim_generation: string
  readonly done: boolean
  readonly dead: boolean
  readonly cancelled: boolean
}

const wellFormed = (claim: Claim) =>
  typeof claim === "object" && claim !== null && isMessageId(claim.messageId) && typeof claim.worker === "string" &&
  Number.isSafeInteger(claim.generation)

export const make = (sql: SqlClient.SqlClient, settings: Settings, spec: QueueSpec, operationPrefix: string) => {
  const table = sql.literal(spec.table)
  const done = sql.literal(spec.done)
  const lifecycle = Lifecycle.make(spec)
  const open = sql.literal(lifecycle.open)
  const op = (name: string) => `${operationPrefix}.${name}`

  // The projector's hot path (claim, completeMany, renewals, give-backs): one round trip
  // outside a transaction.
  const boundedOne = <Row extends object>(name: string, statement: Bounded<Row>) =>
    boundedStatement(sql, settings, op(name), statement).pipe(classifySqlErrors(op(name)))

  const claimFunction = sql.literal(spec.claimFunction)
  const filterType = sql.literal(spec.filterType)

  /**
   * Claims up to `limit` ready rows in id order, through the queue's claim function
   * (migrations 8 and 12). `filter` is the function's fourth argument (topics, consumer).
   */
  const claim = <Row>(options: ClaimOptions, filter: unknown) =>
    Effect.flatMap(
      decodeClaim(options),
      ({ leaseSeconds, limit, maxLeaseExpiries, perKey, worker }) =>
        boundedOne("claim", (settingsApplied) =>
          sql<
            Row & {
              readonly id: string
              readonly generation: string
              readonly attempt: number
              readonly exhausted: boolean
            }
          >`
          SELECT * FROM ${claimFunction}(CASE WHEN ${settingsApplied} THEN ${worker}::text END, ${limit}::integer,
                                         ${leaseSeconds}::float8, ${filter}::${filterType}, ${maxLeaseExpiries}::integer${
            spec.keyedRuns ? sql`, ${perKey}::integer` : sql``
          })`)
          .pipe(
            Effect.tap((rows) => reportExhausted(rows)),
            // UPDATE ... RETURNING does not promise an order; the caller gets id order.
            Effect.map((rows) => inIdOrder(rows.filter((row) => !row.exhausted)))
          )
    )

  /**
   * The rows the claim sent to the dead letters because their lease ran out once too often
   * (a worker died or stalled on each): each said once at WARN (never the payload) and
   * counted, since no worker ever sees them.
   */
  const reportExhausted = (rows: ReadonlyArray<{ readonly id: string; readonly exhausted: boolean }>) =>
    Effect.forEach(rows.filter((row) => row.exhausted), (row) => {
      const group = (row as { readonly topic?: string; readonly consumer?: string }).topic ??
        (row as { readonly consumer?: string }).consumer ?? ""
      return Effect.andThen(
        Metric.update(Metric.withAttributes(exhaustedTotal, { queue: spec.queue }), 1),
        Effect.logWarning(
          `effect-durable: ${spec.queue} message ${row.id} of ${spec.queue === "outbox" ? "topic" : "consumer"} ${
            printable(group)
          } is dead: its lease ran out once too often (a worker died or stalled while delivering it each time)`
        ).pipe(Effect.annotateLogs({ queue: spec.queue, messageId: row.id, group }))
      )
    }, { discard: true })

  /** The claims a batch write may name, and a mismatch for each malformed one: one pass. */
  const checked = (claims: ReadonlyArray<Claim>): [Array<Claim>, Array<SettleFailure>] => {
    const valid: Array<Claim> = []
    const malformed: Array<SettleFailure> = []
    for (const claim of claims) {
      if (wellFormed(claim)) valid.push(claim)
      else malformed.push(spec.mismatch(claim))
    }
    return [valid, malformed]
  }

  // A claim that is not one (null, a string) matches no row; `settle` refuses it before any
  // statement runs, but the statement is built first and must not throw.
  const fence = (claim: Claim) =>
    wellFormed(claim)
      ? sql`id = ${claim.messageId} AND claimed_by = ${claim.worker} AND claim_generation = ${claim.generation}
        AND claimed_until IS NOT NULL AND ${open}`
      : sql`false`

  const stateOf = (ids: ReadonlyArray<string>) =>
    sql<RowState>`SELECT id::text AS id, claimed_by, claim_generation::text AS claim_generation,
                         ${sql.literal(lifecycle.is.done)} AS done, ${sql.literal(lifecycle.is.dead)} AS dead,
                         ${sql.literal(lifecycle.is.cancelled)} AS cancelled
                    FROM ${sql.literal(spec.everyRow)} WHERE id = ANY(${ids}::bigint[])`

  // Why a fenced write changed nothing. A row this very claim already completed is not an
  // error for `complete` (idempotent), and is for every other operation.
  const explain = (claim: Claim, row: RowState | undefined, completing: boolean): Result.Result<void, SettleFailure> =>
    row === undefined
      ? Result.fail(spec.missing(claim.messageId))
      : completing && row.done && row.claimed_by === claim.worker && row.claim_generation === String(claim.generation)
      ? Result.void
      : Result.fail(spec.mismatch(claim, row.cancelled))

  const settle = <A>(
    name: string,
    claim: Claim,
    update: Statement.Statement<A>,
    completing: boolean
  ): Effect.Effect<ReadonlyArray<A>, SettleFailure | DatabaseError> =>
    wellFormed(claim)
      ? bounded(
        sql,
        settings,
        op(name),
        Effect.flatMap(update, (rows) =>
          rows.length > 0
            ? Effect.succeed(rows)
            : Effect.flatMap(
              stateOf([claim.messageId]),
              (found) => Effect.as(Effect.fromResult(explain(claim, found[0], completing)), rows)
            ))
      )
      : Effect.fail(spec.mismatch(claim))

  /** Marks the claimed row done; idempotent for a row this claim already completed. */
  const complete = (claim: Claim) =>
    Effect.asVoid(settle(
      "complete",
      claim,
      spec.moves
        ? Moves.move(sql, settings.table, {
          from: "outbox",
          to: "outbox_history",
          where: fence(claim),
          changes: { projected_at: "now()", claimed_until: "NULL", last_error: "NULL" },
          returning: "id"
        })
        : sql`UPDATE ${table} SET ${done} = now(), claimed_until = NULL, last_error = NULL WHERE ${
          fence(claim)
        } RETURNING id`,
      true
    ))

  /** Completes many claims in one statement; each that cannot be completed is reported. */
  const completeMany = (claims: ReadonlyArray<Claim>): Effect.Effect<CompleteManyResult, DatabaseError> =>
    Effect.gen(function*() {
      if (claims.length === 0) return { completed: [], rejected: [] }
      // Past the batch bound, in slices: one statement each.
      if (claims.length > MAX_BATCH) {
        const parts = yield* Effect.forEach(
          Array.from(
            { length: Math.ceil(claims.length / MAX_BATCH) },
            (_, i) => claims.slice(i * MAX_BATCH, (i + 1) * MAX_BATCH)
          ),
          completeMany
        )
        return { completed: parts.flatMap((p) => p.completed), rejected: parts.flatMap((p) => p.rejected) }
      }
      const [valid, malformed] = checked(claims)
      // Each row is found through the primary key and checked against its own claim in a
      // jsonb map (a binary search), never by joining the claims: a join was planned as a
      // nested loop over every claimed row times every claim once the statistics said
      // "nothing is claimed" (150 ms for 500 claims).
      const updated = yield* batchWrite("completeMany", spec.batchWrites.completeMany, valid)
      const completed = new Set(updated.map((row) => row.id))
      const unsettled = valid.filter((c) => !completed.has(c.messageId))
      if (unsettled.length === 0) return { completed: [...completed], rejected: malformed }
      const states = new Map(
        (yield* stateOf(unsettled.map((c) => c.messageId)).pipe(classifySqlErrors(op("completeMany")))).map((
          row
        ) => [row.id, row])
      )
      const rejected: Array<SettleFailure> = [...malformed]
      for (const claim of unsettled) {
        const outcome = explain(claim, states.get(claim.messageId), true)
        if (Result.isFailure(outcome)) rejected.push(outcome.failure)
        else completed.add(claim.messageId)
      }
      return { completed: [...completed], rejected }
    })

  /**
   * Gives the row back after a failed delivery: ready again after `retryDelay` (database
   * clock), or dead at once when `permanent` or when this was its last allowed failure.
   * `last_error` says which ended it, and the failure joins the row's `failures` history
   * (the last `FAILURE_HISTORY`). Returns whether it is now dead.
   */
  const release = (claim: Claim, options: ReleaseOptions) =>
    Effect.gen(function*() {
      const error = yield* decodeError(options.error)
      const retrySeconds = Duration.toMillis(yield* decodeRetryDelay(options.retryDelay)) / 1000
      const permanent = options.permanent === true
      const rows = yield* settle(
        "release",
        claim,
        Settle.release(sql, settings, spec, fence(claim), { error, retrySeconds, permanent }),
        false
      )
      return { dead: rows[0]?.dead === true }
    })

  /**
   * One fenced batch write (migration 10's functions) over `claims`, in one statement: the
   * function's own UPDATE is planned, and takes its table lock, after the settings applied.
   * Each row is found through the primary key and checked against its own claim in a jsonb
   * map of fences; returns the ids it changed.
   */
  const batchWrite = (name: string, write: string, claims: ReadonlyArray<Claim>, extra?: Statement.Fragment) => {
    const ids = claims.map((c) => c.messageId)
    // The jsonb map of fences, written as text directly: ids are digits (checked), each
    // worker's name is quoted once. (`Object.fromEntries` over digit keys made a slow
    // dictionary object for `JSON.stringify` to walk: a quarter of a mark's client time.)
    const quoted = new Map<string, string>()
    const entries = claims.map((c) => {
      let worker = quoted.get(c.worker)
      if (worker === undefined) quoted.set(c.worker, worker = JSON.stringify(c.worker))
      return `"${c.messageId}":[${worker},${c.generation}]`
    })
    const fences = `{${entries.join(",")}}`
    return boundedOne(name, (settingsApplied) =>
      sql<{ id: string }>`SELECT id FROM ${sql.literal(write)}(
        CASE WHEN ${settingsApplied} THEN ${ids}::bigint[] END, ${fences}::jsonb${extra ?? sql``}) AS id`)
  }

  /**
   * One fenced statement over many claims (`renewLeases`, `giveBack`): the ones it did not
   * apply to are reported as stale or missing, never failed.
   */
  const many = (name: string, write: string, claims: ReadonlyArray<Claim>, extra?: Statement.Fragment) =>
    Effect.gen(function*() {
      const [valid, rejected] = checked(claims)
      if (valid.length === 0) return { applied: [], rejected } satisfies ManyResult
      const updated = yield* batchWrite(name, write, valid, extra)
      const applied = new Set(updated.map((row) => row.id))
      const unapplied = valid.filter((c) => !applied.has(c.messageId))
      if (unapplied.length > 0) {
        const states = new Map(
          (yield* stateOf(unapplied.map((c) => c.messageId)).pipe(classifySqlErrors(op(name)))).map((
            row
          ) => [row.id, row])
        )
        for (const claim of unapplied) {
          const outcome = explain(claim, states.get(claim.messageId), false)
          if (Result.isFailure(outcome)) rejected.push(outcome.failure)
        }
      }
      return { applied: [...applied], rejected } satisfies ManyResult
    })

  /** Extends the leases of many claims in one statement (the projector's keeper). */
  const renewMany = (claims: ReadonlyArray<Claim>, lease: Duration.Input) =>
    Effect.flatMap(
      decodeLease(lease),
      (decoded) =>
        many("renewLeases", spec.batchWrites.renewMany, claims, sql`, ${Duration.toMillis(decoded) / 1000}::float8`)
    )

  /** Unclaims rows whose work never started, or is abandoned on shutdown: nothing is counted. */
  const giveBack = (claims: ReadonlyArray<Claim>, options: { readonly unstarted?: boolean } = {}) =>
    many(
      "giveBack",
      options.unstarted === true ? spec.batchWrites.giveBackUnstartedMany : spec.batchWrites.giveBackMany,
      claims
    )

  /** Extends the lease of a row still held by this claim (a heartbeat for slow work). */
  const renew = (claim: Claim, lease: Duration.Input) =>
    Effect.flatMap(decodeLease(lease), (decoded) =>
      settle(
        "renewLease",
        claim,
        sql`UPDATE ${table} SET claimed_until = clock_timestamp() + make_interval(secs => ${
          Duration.toMillis(decoded) / 1000
        }::float8)
             WHERE ${fence(claim)} AND ${
          sql.literal(spec.renewable(`${Duration.toMillis(decoded) / 1000}::float8`))
        } RETURNING id`,
        false
      )).pipe(Effect.asVoid)

  /** This claim's row while it holds it with its lease running, locked until the transaction ends. */
  const heldRow = (claim: Claim) =>
    sql`SELECT id FROM ${table} WHERE ${fence(claim)} AND claimed_until > now() FOR UPDATE`
  /** Whether the claim holds its row: one statement of the caller's transaction, under its bounds. */
  const holds = (claim: Claim): Effect.Effect<boolean, DatabaseError> =>
    wellFormed(claim)
      ? heldRow(claim).pipe(classifySqlErrors(op("holds")), Effect.map((rows) => rows.length > 0))
      : Effect.succeed(false)
  /** `write(held)` in one statement with the claim's fence (`held`: it holds); the rows `write` returned. */
  const whileHolding = (claim: Claim, write: (held: Statement.Fragment) => Statement.Fragment) =>
    sql<{ held: boolean; rows: ReadonlyArray<unknown> }>`
      WITH h AS (${heldRow(claim)}), w AS (${write(sql`EXISTS (SELECT 1 FROM h)`)})
      SELECT EXISTS (SELECT 1 FROM h) AS held, coalesce((SELECT json_agg(w.*) FROM w), '[]'::json) AS rows`.pipe(
      classifySqlErrors(op("whileHolding")),
      Effect.map((rows) => rows[0]!)
    )

  return { claim, complete, completeMany, release, renew, renewMany, giveBack, holds, whileHolding }
}
