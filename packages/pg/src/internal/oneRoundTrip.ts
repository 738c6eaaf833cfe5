/**
 * One round trip for a worker's statement outside any transaction (claim, mark, renew, give
 * back): the settings and the statement travel as ONE statement, which PostgreSQL runs as one
 * implicit transaction. The settings sit in a MATERIALIZED CTE and the statement refers to it
 * through `settingsApplied`, a one-time condition evaluated before any row is read or locked:
 * so `lock_timeout` bounds the statement's own row lock waits, `synchronous_commit` its
 * commit, and `set_config(..., true)` ends with it (nothing leaks into the pooled connection).
 * A TABLE lock is taken when a statement is planned, before its CTE runs: so the worker's
 * statements name no queue table themselves, they call functions (the claims, migration 10's
 * batch writes) whose own statements are planned, and locked, after the settings.
 *
 * Effect 4's driver speaks only the extended protocol, which refuses two statements in one
 * text; Effect 3's path sent `set_config(...); statement` as one simple query instead.
 *
 * `statement_timeout` cannot bound the statement that sets it (the timer starts before), so
 * with a statement timeout configured, and inside a caller's transaction, the statement runs
 * in a short transaction of its own (a savepoint inside the caller's) with the timeouts set first.
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as SqlClient from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import type * as Statement from "effect/sql/Statement"
import type { Settings } from "../DurableConfig.js"
import { bounded, transact, workerSettings } from "./transaction.js"

/**
 * A worker statement, given a condition that is true once the settings are in force: put it
 * where it is evaluated before any row is touched (the `WHERE` of an `UPDATE`, an argument of
 * a set-returning function).
 */
export type Bounded<Row extends object> = (settingsApplied: Statement.Fragment) => Statement.Statement<Row>

/** Runs a worker statement under the substrate's bounds, in one round trip when it can. */
export const boundedStatement = <Row extends object>(
  sql: SqlClient.SqlClient,
  settings: Settings,
  operation: string,
  statement: Bounded<Row>
): Effect.Effect<ReadonlyArray<Row>, SqlError | DatabaseError> =>
  Effect.flatMap(Effect.serviceOption(sql.transactionService), (transaction) =>
    Option.isSome(transaction)
      ? bounded(sql, settings, operation, statement(sql`true`))
      : Option.isSome(settings.statementTimeout)
      ? transact(sql, operation, Effect.andThen(workerSettings(sql, settings), statement(sql`true`)))
      : sql<Row>`WITH durable_settings AS MATERIALIZED (${workerSettings(sql, settings)})
          ${statement(sql`(SELECT true FROM durable_settings)`)}`)
