// What pg suites share beyond `@effect-durable/testing`: a plain fresh database (for suites
// that migrate themselves), barriers the database decides, and the SQLSTATE of a failure.
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { sqlStateOf } from "../src/ErrorClassification.js"
export { eventually } from "@effect-durable/testing/Eventually"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import type { SettingsInput } from "../src/DurableConfig.js"
import type * as Outbox from "../src/Outbox.js"

export const database = (options: TestDatabase.Options = {}) =>
  TestDatabase.layerFresh({ maxConnections: 12, ...options })

/** A migrated substrate in a fresh database: settings, ledger, outbox, inbox, CAS. */
export const substrate = (
  settings: SettingsInput = {},
  options: TestDatabase.Options = {},
  outbox: Outbox.OutboxOptions = {}
) => TestSubstrate.layer({ settings, outbox, database: options })

/**
 * Waits until `n` sessions wait for an advisory lock: a barrier the database decides.
 * Polls on the live clock (the TestClock of `it.effect` never advances by itself).
 */
export const waitersOnAdvisoryLocks = (n: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ waiting: number }>`SELECT count(*)::int AS waiting FROM pg_locks
                             WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
      .pipe(
        Effect.map((rows) => rows[0]!.waiting),
        Effect.repeat({ until: (waiting) => waiting >= n, schedule: Schedule.spaced("10 millis") }),
        Effect.timeoutOrElse({
          duration: "20 seconds",
          orElse: () => Effect.fail(new Error(`fewer than ${n} lock waiters`))
        }),
        TestClock.withLive
      ))

/** Releases `n` fibers at once; each awaits the returned gate before it starts. */
export const barrier = Effect.map(Deferred.make<void>(), (gate) => ({
  wait: Deferred.await(gate),
  open: Deferred.succeed(gate, undefined)
}))

/** The SQLSTATE of a failure (a driver `SqlError` or a classified `DatabaseError`). */
export const sqlState = (error: unknown): string | undefined => sqlStateOf(error) ?? undefined
