/**
 * PostgreSQL failures are classified here and nowhere else: a `DatabaseError` says whether
 * running the same transaction again can succeed.
 *
 * @since 0.1.0
 */
import { DatabaseError } from "@effect-durable/core/Errors"
import { SqlError } from "effect/sql/SqlError"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"

/** SQLSTATEs after which a retry of the whole transaction can succeed. */
export const RETRYABLE_SQLSTATES: ReadonlySet<string> = new Set([
  "40001", // serialization_failure
  "40P01", // deadlock_detected
  "55P03", // lock_not_available (lock_timeout)
  "57014", // query_canceled (statement_timeout)
  "57P01", // admin_shutdown
  "57P02", // crash_shutdown
  "57P03", // cannot_connect_now
  "53300" // too_many_connections
])

// Socket-level failures from the driver carry a Node error code instead of a SQLSTATE.
const RETRYABLE_NODE_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH"
])

const CONNECTION_LOST = /Connection terminated|connection ended|Client has encountered a connection error|timeout exceeded when trying to connect/i

export const isRetryableCode = (code: string): boolean => RETRYABLE_SQLSTATES.has(code) || code.startsWith("08")

const sqlState = (cause: unknown): string | null => {
  const code = (cause as { code?: unknown } | null)?.code
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : null
}

/** Classifies any failure of a statement issued on behalf of `operation`. */
export const classify = (operation: string) => (error: unknown): DatabaseError => {
  const cause = error instanceof SqlError ? error.cause : error
  const code = sqlState(cause)
  const nodeCode = (cause as { code?: unknown } | null)?.code
  const detail = cause instanceof Error ? cause.message : error instanceof Error ? error.message : String(cause)
  const retryable = code !== null
    ? isRetryableCode(code)
    : (typeof nodeCode === "string" && RETRYABLE_NODE_CODES.has(nodeCode)) || CONNECTION_LOST.test(detail)
  return new DatabaseError({ code, retryable, operation, detail, cause })
}

/**
 * Maps a statement's `SqlError` to the classified `DatabaseError` (the original as its
 * `cause`). Also applied to what the caller's own effects raise inside a substrate
 * transaction (`decide`, an inbox effect): a lock timeout there is as retryable as ours.
 */
export const classifySqlErrors = (operation: string) =>
<A, E, R>(effect: Effect.Effect<A, E | SqlError, R>): Effect.Effect<A, Exclude<E, SqlError> | DatabaseError, R> =>
  Effect.catchIf(
    effect,
    (error): error is SqlError => error instanceof SqlError,
    (error) => Effect.fail(classify(operation)(error))
  ) as Effect.Effect<A, Exclude<E, SqlError> | DatabaseError, R>

/**
 * `@effect/sql` 0.52 turns a failed COMMIT into a defect; a serialization failure or a
 * lost connection at commit is an expected, classified failure for us.
 */
export const classifyCommitDefects = (operation: string) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | DatabaseError, R> =>
  Effect.catchCause(effect, (cause): Effect.Effect<never, E | DatabaseError> => {
    const defect = Cause.findDefect(cause)
    return defect._tag === "Some" && defect.value instanceof SqlError && !Cause.hasInterrupts(cause)
      ? Effect.fail(classify(operation)(defect.value))
      : Effect.failCause(cause)
  })
