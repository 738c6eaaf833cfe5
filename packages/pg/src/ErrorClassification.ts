/**
 * PostgreSQL failures are classified here and nowhere else: a `DatabaseError` says whether
 * running the same transaction again can succeed.
 *
 * @since 0.1.0
 */
import { DatabaseError } from "@effect-durable/core/Errors"
import * as Effect from "effect/Effect"
import * as Predicate from "effect/Predicate"
import { SqlError } from "effect/sql/SqlError"

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

// Socket-level failures carry a Node error code instead of a SQLSTATE.
const RETRYABLE_NODE_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH"
])

export const isRetryableCode = (code: string): boolean => RETRYABLE_SQLSTATES.has(code) || code.startsWith("08")

const codeOf = (cause: unknown): unknown => Predicate.hasProperty(cause, "code") ? cause.code : undefined

const sqlState = (cause: unknown): string | null => {
  const code = codeOf(cause)
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : null
}

/**
 * The SQLSTATE of a failure: a driver `SqlError` (its reason's cause carries the server's
 * fields), a classified `DatabaseError`, or a raw server error; `null` when there is none.
 */
export const sqlStateOf = (error: unknown): string | null =>
  error instanceof SqlError
    ? sqlState(error.reason.cause)
    : error instanceof DatabaseError
    ? error.code
    : sqlState(error)

/**
 * Classifies any failure of a statement issued on behalf of `operation`. The driver names
 * its reason (`ConnectionError`, `LockTimeoutError`...), but the SQLSTATE decides here: a
 * terminated backend (57P01) arrives as an `UnknownError` and is as retryable as a lost socket.
 */
export const classify = (operation: string) => (error: unknown): DatabaseError => {
  const reason = error instanceof SqlError ? error.reason : undefined
  const cause = reason === undefined ? error : reason.cause
  const code = sqlState(cause)
  const nodeCode = codeOf(cause)
  const detail = cause instanceof Error
    ? cause.message
    : reason?.message ?? (error instanceof Error ? error.message : String(error))
  const retryable = code !== null
    ? isRetryableCode(code)
    : reason?._tag === "ConnectionError" || (typeof nodeCode === "string" && RETRYABLE_NODE_CODES.has(nodeCode))
  return new DatabaseError({ code, retryable, operation, detail, cause })
}

/**
 * Maps a statement's `SqlError` to the classified `DatabaseError` (the original as its
 * `cause`). Also applied to what the caller's own effects raise inside a substrate
 * transaction (`decide`, an inbox effect): a lock timeout there is as retryable as ours.
 */
export const classifySqlErrors =
  (operation: string) =>
  <A, E, R>(effect: Effect.Effect<A, E | SqlError, R>): Effect.Effect<A, Exclude<E, SqlError> | DatabaseError, R> =>
    Effect.catchIf(
      effect,
      (error): error is SqlError => error instanceof SqlError,
      (error) => Effect.fail(classify(operation)(error))
    ) as Effect.Effect<A, Exclude<E, SqlError> | DatabaseError, R>

/** SQLSTATE classes of having no session at all: connection exception, invalid authorization, no such database. */
const SESSION_CLASSES: ReadonlySet<string> = new Set(["08", "28", "3D"])
/** Socket and name-resolution failures: the server was never reached. */
const UNREACHED_NODE_CODES: ReadonlySet<string> = new Set([...RETRYABLE_NODE_CODES, "ENOTFOUND", "EAI_AGAIN"])

/**
 * Whether a classified failure means no session with the database could be had or kept:
 * refused, unreachable, authentication failed, no such database, the connection cut. The
 * driver's reason says so when it knows (`ConnectionError`, `AuthenticationError`), the server
 * by its SQLSTATE class, the socket by its code; `pg` reports a connection the server closed
 * mid-statement only by its message, "Connection terminated".
 */
export const isSessionFailure = (error: DatabaseError): boolean => {
  if (error.code !== null) return SESSION_CLASSES.has(error.code.slice(0, 2))
  const reason = error.cause instanceof SqlError ? error.cause.reason : undefined
  if (reason?._tag === "ConnectionError" || reason?._tag === "AuthenticationError") return true
  const cause = reason === undefined ? error.cause : reason.cause
  const nodeCode = codeOf(cause)
  if (typeof nodeCode === "string" && UNREACHED_NODE_CODES.has(nodeCode)) return true
  return cause instanceof Error && /^Connection terminated/.test(cause.message)
}
