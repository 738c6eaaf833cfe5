/**
 * The substrate's own transaction primitives, for application code: a transaction whose lock
 * waits are bounded, and a transaction-scoped advisory lock on a key of your own. Both are
 * safe behind PgBouncer's transaction pooling (nothing outlives the transaction) and leave a
 * caller's transaction settings as they found them.
 *
 * @since 0.1.0
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import { InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import { classifySqlErrors } from "./ErrorClassification.js"
import { advisoryKey, bounded, inCallerTransaction, transact } from "./internal/transaction.js"

const decodeTimeout = Input.argument("lockTimeout", Input.DurationIn({ max: "1 day" }))
const decodeStatementTimeout = Input.argument("statementTimeout", Input.DurationIn({ max: "1 day" }))
const decodeKey = Input.argument("key", Input.Text(1024))

/**
 * Runs `effect` in a transaction (a savepoint inside yours) whose own failures come back as a
 * classified `DatabaseError` under `operation`, never as a defect: a failed BEGIN or COMMIT,
 * and a ROLLBACK that failed beside a failure of `effect` because the connection is gone
 * (`effect`'s failure stands then; `sql.withTransaction` alone makes the whole cause a
 * defect, which code that retries database failures would not see). The SQL errors of
 * `effect` come back classified too.
 *
 * @since 0.2.0
 */
export const transaction = (operation: string) =>
<A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, SqlError> | DatabaseError, R | SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => transact(sql, operation, classifySqlErrors(operation)(effect)))

/**
 * Runs `effect` in a transaction (a savepoint inside yours) where a lock wait longer than
 * `lockTimeout` fails with a retryable `DatabaseError` (55P03), and, when given, a statement
 * longer than `statementTimeout` too (57014). SQL errors of `effect` come back classified.
 */
export const withTimeouts = (options: {
  readonly lockTimeout: Duration.Input
  readonly statementTimeout?: Duration.Input
}) =>
<A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, SqlError> | InvalidInput | DatabaseError, R | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const lockTimeout = yield* decodeTimeout(options.lockTimeout)
    const statementTimeout = options.statementTimeout === undefined
      ? Option.none()
      : Option.some(yield* decodeStatementTimeout(options.statementTimeout))
    return yield* bounded(sql, { lockTimeout, statementTimeout }, "Transactions.withTimeouts", effect)
  })

/**
 * Takes a transaction-scoped advisory lock on `key` (in `namespace`, hashed to 64 bits with
 * SHA-256): held until the transaction ends, never leaked by a crash or a pooler. With
 * `wait: false` it does not queue and answers whether it got the lock; waiting is bounded by
 * the transaction's `lock_timeout`. Only inside a transaction: outside one it is refused.
 */
export const advisoryLock = (
  namespace: string,
  key: string,
  options: { readonly wait?: boolean } = {}
): Effect.Effect<boolean, InvalidInput | DatabaseError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* decodeKey(namespace)
    yield* decodeKey(key)
    if (!(yield* inCallerTransaction(sql))) {
      return yield* new InvalidInput({ argument: "transaction", rule: "advisoryLock runs inside sql.withTransaction" })
    }
    const lockKey = advisoryKey("effect-durable/app", namespace, key)
    const wait = options.wait !== false
    const rows = yield* sql<{ locked: boolean }>`
      SELECT ${
      wait
        ? sql`pg_advisory_xact_lock(${lockKey.toString()}::bigint) IS NOT NULL`
        : sql`pg_try_advisory_xact_lock(${lockKey.toString()}::bigint)`
    } AS locked`
      .pipe(classifySqlErrors("Transactions.advisoryLock"))
    return rows[0]?.locked === true
  })
