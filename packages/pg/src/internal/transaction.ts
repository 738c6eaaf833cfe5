/**
 * Substrate transactions: bounded lock waits set per transaction (`set_config(..., true)`,
 * gone at commit, safe under PgBouncer transaction pooling), transaction-scoped advisory
 * locks only, and one place where failures of BEGIN/COMMIT are classified.
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import type * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { createHash } from "node:crypto"
import type { Settings } from "../DurableConfig.js"
import { classify, classifyCommitDefects, classifySqlErrors } from "../ErrorClassification.js"

const millis = (duration: Duration.Duration) => String(Math.max(1, Math.round(Duration.toMillis(duration))))

/**
 * The `set_config` calls as a SELECT list. They are placed in a MATERIALIZED CTE by callers
 * that lock in the same statement, so the timeouts are in force before the lock is awaited.
 */
export const timeoutSettings = (sql: SqlClient.SqlClient, settings: Settings) =>
  Option.match(settings.statementTimeout, {
    onNone: () => sql`SELECT set_config('lock_timeout', ${millis(settings.lockTimeout)}, true)`,
    onSome: (statementTimeout) =>
      sql`SELECT set_config('lock_timeout', ${millis(settings.lockTimeout)}, true),
                 set_config('statement_timeout', ${millis(statementTimeout)}, true)`
  })

/** Sets the per-transaction timeouts (one round trip). */
export const setLocalTimeouts = (sql: SqlClient.SqlClient, settings: Settings) =>
  Effect.asVoid(timeoutSettings(sql, settings))

/**
 * Sets the timeouts and takes a transaction-scoped advisory lock in one round trip. With
 * `wait: false` it does not queue behind a holder and returns whether it got the lock.
 * A separate statement must read what the lock protects: a statement's snapshot is taken
 * before it waits, so a read in this one would miss what the previous holder committed.
 */
/** The statement `lockForTransaction` runs: one row, `locked`. */
export const lockStatement = (sql: SqlClient.SqlClient, settings: Settings, lockKey: bigint, wait: boolean) =>
  sql<{ locked: boolean }>`WITH settings AS MATERIALIZED (${timeoutSettings(sql, settings)})
      SELECT ${wait ? sql`pg_advisory_xact_lock(${lockKey.toString()}::bigint) IS NOT NULL` : sql`pg_try_advisory_xact_lock(${lockKey.toString()}::bigint)`} AS locked
        FROM settings`

export const lockForTransaction = (sql: SqlClient.SqlClient, settings: Settings, lockKey: bigint, wait: boolean) =>
  Effect.map(lockStatement(sql, settings, lockKey, wait), (rows) => rows[0]?.locked === true)

/** A 64-bit advisory lock key for a namespaced identity (SHA-256, first 8 bytes, signed). */
export const advisoryKey = (...parts: ReadonlyArray<string>): bigint =>
  createHash("sha256").update(parts.join("\u0000"), "utf8").digest().readBigInt64BE(0)

// Failures of the body travel through the transaction boxed, so that only the failures of
// BEGIN, COMMIT and ROLLBACK are classified here and a caller's own errors stay as they are.
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
    classifyCommitDefects(operation),
    Effect.catchAll((error): Effect.Effect<never, E | DatabaseError> =>
      error instanceof BodyFailure
        ? Effect.fail(error.error as E)
        : Effect.fail(error instanceof SqlError ? classify(operation)(error) : error as DatabaseError)
    )
  )

/**
 * A substrate operation's own short transaction (a savepoint inside a caller's), with the
 * lock and statement bounds set first; its SQL failures are classified under `operation`.
 */
export const bounded = <A, E, R>(
  sql: SqlClient.SqlClient,
  settings: Settings,
  operation: string,
  body: Effect.Effect<A, E | SqlError, R>
): Effect.Effect<A, Exclude<E, SqlError> | DatabaseError, R> =>
  transact(sql, operation, Effect.zipRight(setLocalTimeouts(sql, settings), body).pipe(classifySqlErrors(operation)))
