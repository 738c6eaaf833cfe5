/**
 * The leased-queue mechanics the outbox and the stored inbox share: claim with
 * `FOR UPDATE SKIP LOCKED` and a lease on the database clock, fenced completion, release
 * with a retry delay or to the dead letters, lease renewal, dead-letter listing, redrive,
 * discard and purge. A claim token is (row id, worker, claim generation); every write of a
 * claimed row checks all three, so a worker whose lease was lost and whose row was claimed
 * again can change nothing.
 */
import { type DatabaseError, DurableConfigError } from "@effect-durable/core/Errors"
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type * as Statement from "@effect/sql/Statement"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { randomBytes } from "node:crypto"
import type { Settings } from "../DurableConfig.js"
import { classifySqlErrors } from "../ErrorClassification.js"
import { claimQuery } from "../Migrations.js"
import { boundedStatement, inline, TextCache } from "./oneRoundTrip.js"
import { setLocalTimeouts, timeoutSettings, transact } from "./transaction.js"
import { boundedCount, boundedText, finiteDuration, seconds } from "./validation.js"

/** Ascending order of decimal ids (no leading zeros): shorter is smaller, then by text. */
const byId = (a: { readonly id: string }, b: { readonly id: string }) =>
  a.id.length - b.id.length || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

/** `rows` in id order; they usually come back so (the primary key's order), then no sort is paid. */
const inIdOrder = <Row extends { readonly id: string }>(rows: Array<Row>): Array<Row> => {
  for (let i = 1; i < rows.length; i++) if (byId(rows[i - 1]!, rows[i]!) > 0) return rows.sort(byId)
  return rows
}

/** Proof of a claim: only the worker holding the current generation may settle the row. */
export interface Claim {
  readonly messageId: string
  readonly worker: string
  readonly generation: number
}

export interface QueueSpec<Mismatch, Missing> {
  /** Qualified, quoted table name. */
  readonly table: string
  /** Qualified, quoted name of the queue's claim function (migration 7), and its filter's type. */
  readonly claimFunction: string
  readonly filterType: "text" | "text[]"
  /** The column that marks a row done (`projected_at`, `processed_at`); our constant. */
  readonly done: string
  /** `Outbox` or `Inbox`: prefixes operation names in errors and spans. */
  readonly name: string
  readonly mismatch: (claim: Claim) => Mismatch
  readonly missing: (messageId: string) => Missing
}

/** How a claimed row is given back. */
export interface ReleaseOptions {
  /** Recorded as `last_error`. */
  readonly error: string
  /** Not claimable again before now + retryDelay (database clock). */
  readonly retryDelay: Duration.DurationInput
  /** Straight to the dead letters, whatever the attempts left. */
  readonly permanent?: boolean
}

/** Which done rows a purge deletes, and how many per statement. */
export interface PurgeOptions {
  readonly olderThan: Duration.DurationInput
  /** Rows per DELETE; default 1000. */
  readonly batchSize?: number
}

export interface ClaimOptions {
  readonly worker: string
  readonly limit: number
  readonly lease: Duration.DurationInput
}

/** What a settle operation found when its fenced update changed no row. */
interface RowState {
  readonly id: string
  readonly claimed_by: string | null
  readonly claim_generation: string
  readonly done: boolean
  readonly dead: boolean
}

export interface CompleteManyResult<Mismatch, Missing> {
  /** Ids now done (including those this very claim had already completed). */
  readonly completed: ReadonlyArray<string>
  readonly rejected: ReadonlyArray<Mismatch | Missing>
}

export interface DeadLetter {
  readonly id: string
  readonly attempts: number
  readonly lastError: string | null
  readonly deadAt: string
}

const MAX_BATCH = 10_000
const ID = /^[1-9][0-9]{0,18}$/

export const validateWorker = (worker: unknown) => boundedText("worker", worker, 128)

export const make = <Mismatch, Missing>(
  sql: SqlClient.SqlClient,
  settings: Settings,
  spec: QueueSpec<Mismatch, Missing>
) => {
  const table = sql.literal(spec.table)
  const done = sql.literal(spec.done)
  const op = (name: string) => `${spec.name}.${name}`
  const validId = (id: string) => typeof id === "string" && ID.test(id)

  // A claim, settle or renewal runs in its own short transaction (a savepoint inside a
  // caller's) so the lock and statement bounds apply to it.
  const bounded = <A, E, R>(name: string, body: Effect.Effect<A, E | SqlError, R>) =>
    transact(sql, op(name), Effect.zipRight(setLocalTimeouts(sql, settings), body).pipe(classifySqlErrors(op(name))))

  // The projector's hot path (claim, completeMany): one round trip outside a transaction.
  const boundedOne = <Row>(name: string, statement: Statement.Statement<Row>, cacheKey?: string) =>
    boundedStatement(
      sql,
      timeoutSettings(sql, settings),
      statement,
      bounded(name, statement),
      cacheKey === undefined ? undefined : { cache: claimTexts, key: cacheKey }
    ).pipe(classifySqlErrors(op(name)))
  // A projector claims with the same options every time: its claim's text is built once.
  const claimTexts = new TextCache()

  const validateClaim = (options: ClaimOptions) =>
    Effect.all([
      validateWorker(options.worker),
      boundedCount("limit", options.limit, 1000),
      finiteDuration("lease", options.lease, false)
    ], { discard: true })

  const claimFunction = sql.literal(spec.claimFunction)
  const filterType = sql.literal(spec.filterType)
  const claimArguments = (options: ClaimOptions, filter: unknown) =>
    sql`${options.worker}::text, ${options.limit}::integer, ${seconds(options.lease)}::float8, ${filter}::${filterType}`

  /**
   * Claims up to `limit` ready rows in id order, through the queue's claim function
   * (migration 7). `filter` is the function's fourth argument (topics, consumer).
   */
  const claim = <Row>(options: ClaimOptions, filter: unknown) =>
    Effect.zipRight(
      validateClaim(options),
      // Built after validation: an invalid lease must fail typed, not throw while building.
      Effect.suspend(() =>
        boundedOne(
          "claim",
          sql<Row & { readonly id: string; readonly generation: string; readonly attempt: number; readonly exhausted: boolean }>`
            SELECT * FROM ${claimFunction}(${claimArguments(options, filter)})`,
          JSON.stringify([options.worker, options.limit, seconds(options.lease), filter])
        )
      ).pipe(
        // UPDATE ... RETURNING does not promise an order; the caller gets id order.
        Effect.map((rows) => inIdOrder(rows.filter((row) => !row.exhausted)))
      )
    )

  /**
   * The plan the claim function runs for these arguments (`EXPLAIN (FORMAT JSON)` of its
   * query, prepared with the function's generic plan; nothing is claimed).
   */
  const explainClaim = (options: ClaimOptions, filter: unknown) =>
    Effect.zipRight(
      validateClaim(options),
      Effect.scoped(Effect.gen(function*() {
        const [source] = yield* sql<{ source: string | null }>`
          SELECT prosrc AS source FROM pg_proc WHERE oid = to_regproc(${spec.claimFunction})`
        const query = source?.source === null || source === undefined ? undefined : claimQuery(source.source)
        if (query === undefined) return yield* Effect.dieMessage(`${spec.claimFunction} is missing: run the migrations`)
        // One connection: a prepared statement and a session setting live on it, and both
        // are undone whatever happens.
        const connection = yield* sql.reserve
        const name = `effect_durable_explain_${randomBytes(4).toString("hex")}`
        const run = (text: string) => connection.executeUnprepared(text, [], undefined)
        yield* run(`PREPARE ${name}(text, integer, double precision, ${spec.filterType}) AS ${query}`)
        yield* Effect.addFinalizer(() => Effect.ignore(run(`DEALLOCATE ${name}; RESET plan_cache_mode`)))
        yield* run("SET plan_cache_mode = force_generic_plan")
        const rows = yield* run(inline(sql`EXPLAIN (FORMAT JSON) EXECUTE ${sql.literal(name)}(${claimArguments(options, filter)})`))
        return (rows[0] as { "QUERY PLAN": unknown })["QUERY PLAN"]
      })).pipe(classifySqlErrors(op("explainClaim")))
    )

  const fence = (claim: Claim) =>
    sql`id = ${claim.messageId} AND claimed_by = ${claim.worker} AND claim_generation = ${claim.generation}
        AND claimed_until IS NOT NULL AND ${done} IS NULL AND dead_at IS NULL`

  const stateOf = (ids: ReadonlyArray<string>) =>
    sql<RowState>`SELECT id::text AS id, claimed_by, claim_generation::text AS claim_generation,
                         ${done} IS NOT NULL AS done, dead_at IS NOT NULL AS dead
                    FROM ${table} WHERE id = ANY(${ids}::bigint[])`

  // Why a fenced write changed nothing. A row this very claim already completed is not an
  // error for `complete` (idempotent), and is for every other operation.
  const explain = (claim: Claim, row: RowState | undefined, completing: boolean): Effect.Effect<void, Mismatch | Missing> =>
    row === undefined
      ? Effect.fail(spec.missing(claim.messageId))
      : completing && row.done && row.claimed_by === claim.worker && row.claim_generation === String(claim.generation)
      ? Effect.void
      : Effect.fail(spec.mismatch(claim))

  const checkClaim = (claim: Claim) =>
    validId(claim.messageId) && typeof claim.worker === "string" && Number.isSafeInteger(claim.generation)
      ? Effect.void
      : Effect.fail(spec.mismatch(claim))

  const settle = <A>(
    name: string,
    claim: Claim,
    update: Statement.Statement<A>,
    completing: boolean
  ): Effect.Effect<ReadonlyArray<A>, Mismatch | Missing | DatabaseError> =>
    Effect.zipRight(
      checkClaim(claim),
      bounded(
        name,
        Effect.flatMap(update, (rows) =>
          rows.length > 0
            ? Effect.succeed(rows)
            : Effect.flatMap(stateOf([claim.messageId]), (found) => Effect.as(explain(claim, found[0], completing), rows)))
      )
    )

  /** Marks the claimed row done; idempotent for a row this claim already completed. */
  const complete = (claim: Claim) =>
    Effect.asVoid(settle(
      "complete",
      claim,
      sql`UPDATE ${table} SET ${done} = now(), claimed_until = NULL WHERE ${fence(claim)} RETURNING id`,
      true
    ))

  /** Completes many claims in one statement; each that cannot be completed is reported. */
  const completeMany = (claims: ReadonlyArray<Claim>) =>
    Effect.gen(function*() {
      if (claims.length === 0) return { completed: [], rejected: [] }
      yield* boundedCount("claims", claims.length, MAX_BATCH)
      const isValid = (c: Claim) => validId(c.messageId) && Number.isSafeInteger(c.generation)
      const valid = claims.filter(isValid)
      const malformed = claims.filter((c) => !isValid(c)).map(spec.mismatch)
      // Each row is found through the primary key and checked against its own claim in a
      // jsonb map (a binary search), never by joining the claims: a join was planned as a
      // nested loop over every claimed row times every claim once the statistics said
      // "nothing is claimed" (150 ms for 500 claims).
      const fences = JSON.stringify(Object.fromEntries(valid.map((c) => [c.messageId, [c.worker, c.generation]])))
      const updated = yield* boundedOne(
        "completeMany",
        sql<{ id: string }>`
          UPDATE ${table} q SET ${done} = now(), claimed_until = NULL
           WHERE q.id = ANY(${valid.map((c) => c.messageId)}::bigint[])
             AND ${fences}::jsonb -> q.id::text = jsonb_build_array(q.claimed_by, q.claim_generation)
             AND q.claimed_until IS NOT NULL AND q.${done} IS NULL AND q.dead_at IS NULL
          RETURNING q.id::text AS id`
      )
      const completed = new Set(updated.map((row) => row.id))
      const unsettled = valid.filter((c) => !completed.has(c.messageId))
      if (unsettled.length === 0) return { completed: [...completed], rejected: malformed }
      const states = new Map(
        (yield* stateOf(unsettled.map((c) => c.messageId)).pipe(classifySqlErrors(op("completeMany")))).map((row) => [row.id, row])
      )
      const rejected: Array<Mismatch | Missing> = [...malformed]
      for (const claim of unsettled) {
        const outcome = yield* Effect.either(explain(claim, states.get(claim.messageId), true))
        if (outcome._tag === "Left") rejected.push(outcome.left)
        else completed.add(claim.messageId)
      }
      return { completed: [...completed], rejected }
    })

  /**
   * Gives the row back: ready again after `retryDelay` (database clock), or dead at once
   * when `permanent` or when this was its last attempt. Returns whether it is now dead.
   */
  const release = (claim: Claim, error: string, retryDelay: Duration.DurationInput, permanent: boolean) =>
    Effect.zipRight(
      finiteDuration("retryDelay", retryDelay, true),
      settle(
        "release",
        claim,
        sql<{ dead: boolean }>`
          UPDATE ${table} SET claimed_until = NULL, last_error = ${error.slice(0, 4096)},
                 available_at = now() + make_interval(secs => ${seconds(retryDelay)}),
                 dead_at = CASE WHEN ${permanent} OR attempt_count >= max_attempts THEN now() END
           WHERE ${fence(claim)}
          RETURNING dead_at IS NOT NULL AS dead`,
        false
      )
    ).pipe(Effect.map((rows) => ({ dead: rows[0]?.dead === true })))

  /** Extends the lease of a row still held by this claim (a heartbeat for slow work). */
  const renew = (claim: Claim, lease: Duration.DurationInput) =>
    Effect.zipRight(
      finiteDuration("lease", lease, false),
      settle(
        "renewLease",
        claim,
        sql`UPDATE ${table} SET claimed_until = now() + make_interval(secs => ${seconds(lease)})
             WHERE ${fence(claim)} RETURNING id`,
        false
      )
    ).pipe(Effect.asVoid)

  /** Dead rows matching `where`, newest id first, `limit` at a time after `before`. */
  const deadLetters = <Row>(
    options: { readonly limit: number; readonly before?: string },
    where: Statement.Fragment,
    returning: Statement.Fragment
  ) =>
    Effect.gen(function*() {
      yield* boundedCount("limit", options.limit, 1000)
      if (options.before !== undefined && !validId(options.before)) {
        return yield* new DurableConfigError({ field: "before", rule: "a message id" })
      }
      const rows = yield* sql<Row & DeadLetter & { readonly attempts: number }>`
        SELECT id::text AS id, attempt_count AS attempts, last_error AS "lastError", dead_at::text AS "deadAt", ${returning}
          FROM ${table}
         WHERE dead_at IS NOT NULL AND ${where}
           ${options.before === undefined ? sql`` : sql`AND id < ${options.before}`}
         ORDER BY id DESC
         LIMIT ${options.limit + 1}`.pipe(classifySqlErrors(op("deadLetters")))
      const items = rows.slice(0, options.limit)
      return { items, next: rows.length > options.limit ? items[items.length - 1]!.id : undefined }
    })

  const checkIds = (ids: ReadonlyArray<string>) =>
    ids.every(validId)
      ? boundedCount("ids", ids.length, MAX_BATCH)
      : Effect.fail(new DurableConfigError({ field: "ids", rule: "message ids" }))

  /** Makes dead rows ready again with fresh attempts; returns the ids redriven. */
  const redrive = (ids: ReadonlyArray<string>) =>
    Effect.zipRight(
      checkIds(ids),
      sql<{ id: string }>`
        UPDATE ${table} SET dead_at = NULL, attempt_count = 0, available_at = now(), claimed_until = NULL
         WHERE id = ANY(${ids}::bigint[]) AND dead_at IS NOT NULL
        RETURNING id::text AS id`.pipe(classifySqlErrors(op("redrive")))
    ).pipe(Effect.map((rows) => rows.map((row) => row.id)))

  /** Makes done rows ready again (deliver once more); returns the ids replayed. */
  const replay = (ids: ReadonlyArray<string>) =>
    Effect.zipRight(
      checkIds(ids),
      sql<{ id: string }>`
        UPDATE ${table} SET ${done} = NULL, attempt_count = 0, available_at = now(), claimed_until = NULL
         WHERE id = ANY(${ids}::bigint[]) AND ${done} IS NOT NULL
        RETURNING id::text AS id`.pipe(classifySqlErrors(op("replay")))
    ).pipe(Effect.map((rows) => rows.map((row) => row.id)))

  /** Deletes dead rows; returns the ids deleted. */
  const discard = (ids: ReadonlyArray<string>) =>
    Effect.zipRight(
      checkIds(ids),
      sql<{ id: string }>`DELETE FROM ${table} WHERE id = ANY(${ids}::bigint[]) AND dead_at IS NOT NULL
                          RETURNING id::text AS id`.pipe(classifySqlErrors(op("discard")))
    ).pipe(Effect.map((rows) => rows.map((row) => row.id)))

  /**
   * Deletes rows done for longer than `olderThan`, `batchSize` at a time. Each batch locks
   * its rows (`FOR UPDATE SKIP LOCKED`) and re-checks them, so a row replayed or redriven
   * concurrently is never deleted.
   */
  const purge = (options: PurgeOptions) =>
    Effect.gen(function*() {
      const batchSize = options.batchSize ?? 1000
      yield* boundedCount("batchSize", batchSize, MAX_BATCH)
      yield* finiteDuration("olderThan", options.olderThan, true)
      let total = 0
      while (true) {
        const deleted = yield* sql<{ id: string }>`
          DELETE FROM ${table} WHERE id IN (
            SELECT id FROM ${table}
             WHERE ${done} < now() - make_interval(secs => ${seconds(options.olderThan)})
             ORDER BY ${done} LIMIT ${batchSize} FOR UPDATE SKIP LOCKED)
          RETURNING id::text AS id`.pipe(classifySqlErrors(op("purge")))
        total += deleted.length
        if (deleted.length > 0) yield* Effect.logDebug(`effect-durable: ${spec.name} purge deleted ${total} rows so far`)
        if (deleted.length < batchSize) return total
      }
    })

  return { claim, explainClaim, complete, completeMany, release, renew, deadLetters, redrive, replay, discard, purge }
}
