/**
 * Substrate transactions: bounded lock waits set per transaction (`set_config(..., true)`,
 * gone at commit, safe under PgBouncer transaction pooling), transaction-scoped advisory
 * locks only, and one place where failures of BEGIN/COMMIT are classified.
 *
 * The caller's transaction is the caller's: inside it, the substrate works in a savepoint
 * and gives `lock_timeout` and `statement_timeout` back as it found them when it is done (a
 * failure rolls the savepoint back, which undoes them by itself).
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import { SqlError } from "effect/sql/SqlError"
import { createHash } from "node:crypto"
import type { Settings } from "../DurableConfig.js"
import { classify, classifySqlErrors } from "../ErrorClassification.js"

/** The bounds a substrate transaction runs under (the settings' `lockTimeout` and `statementTimeout`). */
export type Timeouts = Pick<Settings, "lockTimeout" | "statementTimeout">

/** A timeout as `set_config` takes it: whole milliseconds, at least 1. */
export const millis = (duration: Duration.Duration) => String(Math.max(1, Math.round(Duration.toMillis(duration))))

/** The substrate's `lock_timeout` and (when set) `statement_timeout`, as `set_config` text. */
export const timeoutValues = (settings: Timeouts) => ({
  lockTimeout: millis(settings.lockTimeout),
  statementTimeout: Option.match(settings.statementTimeout, { onNone: () => null, onSome: millis })
})

/**
 * The `set_config` calls as a SELECT list. They are placed in a MATERIALIZED CTE by callers
 * that lock in the same statement, so the timeouts are in force before the lock is awaited.
 */
export const timeoutSettings = (sql: SqlClient.SqlClient, settings: Timeouts) => {
  const { lockTimeout, statementTimeout } = timeoutValues(settings)
  return statementTimeout === null
    ? sql`SELECT set_config('lock_timeout', ${lockTimeout}, true)`
    : sql`SELECT set_config('lock_timeout', ${lockTimeout}, true), set_config('statement_timeout', ${statementTimeout}, true)`
}

/**
 * The settings a worker's one-round-trip statement runs under (claim, mark, renew, give
 * back): the timeouts, and `synchronous_commit = off` when the settings allow it. Only for
 * statements outside any caller transaction: a caller's commit is never made asynchronous.
 */
export const workerSettings = (
  sql: SqlClient.SqlClient,
  settings: Timeouts & Pick<Settings, "synchronousWorkerCommits">
) => {
  const { lockTimeout, statementTimeout } = timeoutValues(settings)
  const commit = settings.synchronousWorkerCommits ? sql`` : sql`, set_config('synchronous_commit', 'off', true)`
  return statementTimeout === null
    ? sql`SELECT set_config('lock_timeout', ${lockTimeout}, true)${commit}`
    : sql`SELECT set_config('lock_timeout', ${lockTimeout}, true), set_config('statement_timeout', ${statementTimeout}, true)${commit}`
}

/** The caller's timeouts, to be given back. */
export interface PreviousTimeouts {
  readonly lock_timeout: string
  readonly statement_timeout: string
}

/** Sets the substrate's timeouts for the transaction and returns the values they replace. */
const swapTimeouts = (sql: SqlClient.SqlClient, settings: Timeouts) => {
  const { lockTimeout, statementTimeout } = timeoutValues(settings)
  return Effect.map(
    sql<PreviousTimeouts>`
      WITH previous AS MATERIALIZED (
        SELECT current_setting('lock_timeout') AS lock_timeout, current_setting('statement_timeout') AS statement_timeout),
      applied AS MATERIALIZED (
        SELECT set_config('lock_timeout', ${lockTimeout}, true),
               set_config('statement_timeout', coalesce(${statementTimeout}::text, previous.statement_timeout), true)
          FROM previous)
      SELECT previous.* FROM previous, applied`,
    (rows) => rows[0]!
  )
}

/** Gives the caller's transaction its timeouts back. */
export const restoreTimeouts = (sql: SqlClient.SqlClient, previous: PreviousTimeouts) =>
  Effect.asVoid(sql`SELECT set_config('lock_timeout', ${previous.lock_timeout}, true),
                           set_config('statement_timeout', ${previous.statement_timeout}, true)`)

/** Whether the caller has a transaction of this client open around this call. */
export const inCallerTransaction = (sql: SqlClient.SqlClient): Effect.Effect<boolean> =>
  Effect.map(Effect.serviceOption(sql.transactionService), Option.isSome)

/** The statement that takes a transaction-scoped advisory lock (waiting or not): one row, `locked`. */
const lockStatement = (sql: SqlClient.SqlClient, settings: Timeouts, lockKey: bigint, wait: boolean) =>
  sql<{ locked: boolean }>`WITH settings AS MATERIALIZED (${timeoutSettings(sql, settings)})
      SELECT ${
    wait
      ? sql`pg_advisory_xact_lock(${lockKey.toString()}::bigint) IS NOT NULL`
      : sql`pg_try_advisory_xact_lock(${lockKey.toString()}::bigint)`
  } AS locked
        FROM settings`

/**
 * Sets the timeouts and takes a transaction-scoped advisory lock in one round trip. With
 * `wait: false` it does not queue behind a holder and returns whether it got the lock.
 */
export const lockForTransaction = (sql: SqlClient.SqlClient, settings: Timeouts, lockKey: bigint, wait: boolean) =>
  Effect.map(lockStatement(sql, settings, lockKey, wait), (rows) => rows[0]?.locked === true)

/** A 64-bit advisory lock key for a namespaced identity (SHA-256, first 8 bytes, signed). */
export const advisoryKey = (...parts: ReadonlyArray<string>): bigint =>
  createHash("sha256").update(parts.join("\u0000"), "utf8").digest().readBigInt64BE(0)

// Failures of the body travel through the transaction boxed, so that only the failures of
// BEGIN and COMMIT are classified here and a caller's own errors stay as they are. (A failed
// COMMIT is a typed SqlError in Effect 4's sql, as it should be; a failed ROLLBACK is a defect.)
class BodyFailure<E> {
  constructor(readonly error: E) {}
}

/** Runs `body` in a transaction (a savepoint when already inside one). */
export const transact = <A, E, R>(
  sql: SqlClient.SqlClient,
  operation: string,
  body: Effect.Effect<A, E, R>
): Effect.Effect<A, E | DatabaseError, R> =>
  sql.withTransaction(Effect.mapError(body, (error) => new BodyFailure(error))).pipe(
    Effect.catchCause((cause): Effect.Effect<never, E | DatabaseError> => {
      // The body's own failure wins. A ROLLBACK that failed beside it (the connection is gone,
      // so the server discards the transaction anyway) arrives as a defect next to it, and
      // Effect turns the whole cause into defects then: look for the box among both.
      for (const reason of cause.reasons) {
        const value = Cause.isFailReason(reason) ? reason.error : Cause.isDieReason(reason) ? reason.defect : undefined
        if (value instanceof BodyFailure) return Effect.fail(value.error as E)
      }
      // BEGIN or COMMIT failed: classified.
      for (const reason of cause.reasons) {
        if (Cause.isFailReason(reason) && reason.error instanceof SqlError) {
          return Effect.fail(classify(operation)(reason.error))
        }
      }
      return Effect.failCause(cause as Cause.Cause<never>)
    })
  )

/**
 * A substrate operation's own short transaction (a savepoint inside a caller's) with the lock
 * and statement bounds in force; inside a caller's transaction its timeouts are given back
 * after. Its SQL failures are classified under `operation`.
 */
export const bounded = <A, E, R>(
  sql: SqlClient.SqlClient,
  settings: Timeouts,
  operation: string,
  body: Effect.Effect<A, E | SqlError, R>
): Effect.Effect<A, Exclude<E, SqlError> | DatabaseError, R> =>
  Effect.flatMap(inCallerTransaction(sql), (inside) =>
    transact(
      sql,
      operation,
      (inside
        ? Effect.flatMap(swapTimeouts(sql, settings), (previous) =>
          Effect.tap(body, () => restoreTimeouts(sql, previous)))
        : Effect.andThen(timeoutSettings(sql, settings), body)).pipe(classifySqlErrors(operation))
    ))
