/**
 * The schedules' tables as the service and the runner both read and write them: one row shape
 * and column list, one way to enqueue a slot's message inside the caller's transaction, and one
 * slot counter, so a slot decided by the runner and one backfilled by hand are recorded alike.
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import * as Cron from "effect/Cron"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Result from "effect/Result"
import * as SqlClient from "effect/sql/SqlClient"
import type * as SqlError from "effect/sql/SqlError"
import type * as Statement from "effect/sql/Statement"
import { DurableSettings, type Settings } from "../../DurableConfig.js"
import { classifySqlErrors } from "../../ErrorClassification.js"
import * as Outbox from "../../Outbox.js"
import type { Overlap } from "../../Schedules.js"
import { isoUtc } from "../timestamps.js"
import { transact } from "../transaction.js"

/** A schedule's row as `columns` selects it (counters as text: they are bigint). */
export interface Row {
  readonly name: string
  readonly cron: string
  readonly time_zone: string
  readonly topic: string
  readonly payload: unknown
  readonly ordering_key: string | null
  readonly overlap: Overlap
  readonly catch_up_seconds: number
  readonly next_slot: string
  readonly last_slot: string | null
  readonly paused: boolean
  readonly paused_by: string | null
  readonly enqueued: string
  readonly skipped: string
  readonly missed: string
  readonly backfilled: string
}

export type Outcome = "enqueued" | "skipped" | "missed" | "backfilled"

export interface Store {
  readonly sql: SqlClient.SqlClient
  readonly settings: Settings
  /** The schedules table, quoted. */
  readonly schedules: Statement.Fragment
  /** The slot rows' table, quoted. */
  readonly slots: Statement.Fragment
  /** What `Row` reads, timestamps as ISO-8601 UTC. */
  readonly columns: Statement.Fragment
  /** Which process decides, in the slot rows and logs. */
  readonly decider: string
  /** A transaction of its own (a savepoint inside a caller's), its SQL failures classified. */
  readonly transaction: <A, E, R>(
    operation: string,
    body: Effect.Effect<A, E | SqlError.SqlError, R>
  ) => Effect.Effect<A, Exclude<E, SqlError.SqlError> | DatabaseError, R>
  readonly count: (name: string, outcome: Outcome, n: number) => Effect.Effect<void>
  /** The slot's message, in the caller's transaction. */
  readonly enqueue: (row: Row, slot: Date) => Effect.Effect<string, DatabaseError>
}

export const iso = (date: Date) => date.toISOString()

/** A stored schedule's cron (checked when it was defined: one that no longer parses is a bug). */
export const storedCron = (row: { readonly name: string; readonly cron: string; readonly time_zone: string }) => {
  const cron = Cron.parse(row.cron, row.time_zone)
  return Result.isSuccess(cron)
    ? Effect.succeed(cron.success)
    : Effect.die(`schedule ${row.name}: its stored cron no longer parses (${cron.failure.message})`)
}

/** The store over the substrate; `counter` is the public counter of slots by outcome (`Schedules.metrics`). */
export const make = (
  counter: Metric.Counter<number>
): Effect.Effect<Store, never, SqlClient.SqlClient | DurableSettings | Outbox.Outbox> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const outbox = yield* Outbox.Outbox
    const columns = sql.literal(`name, cron, time_zone, topic, payload, ordering_key, overlap, catch_up_seconds,
    ${isoUtc("next_slot")} AS next_slot, ${isoUtc("last_slot")} AS last_slot, paused_at IS NOT NULL AS paused,
    paused_by, enqueued::text, skipped::text, missed::text, backfilled::text`)
    const transaction = <A, E, R>(operation: string, body: Effect.Effect<A, E | SqlError.SqlError, R>) =>
      transact(sql, operation, classifySqlErrors(operation)(body))

    const count = (name: string, outcome: Outcome, n: number) =>
      n === 0 ? Effect.void : Metric.update(Metric.withAttributes(counter, { schedule: name, outcome }), n)

    const enqueue = (row: Row, slot: Date) =>
      outbox.enqueue(row.topic, row.payload, {
        ...(row.ordering_key === null ? {} : { orderingKey: row.ordering_key }),
        headers: { schedule: row.name, "schedule-slot": iso(slot) }
      }).pipe(
        // Checked when the schedule was defined: only a database failure is expected here.
        Effect.catchIf(
          (error): error is Exclude<typeof error, DatabaseError> => error._tag !== "DatabaseError",
          Effect.die
        )
      )

    return {
      sql,
      settings,
      schedules: sql.literal(settings.table("schedules")),
      slots: sql.literal(settings.table("schedule_slots")),
      columns,
      decider: `schedules:${process.pid}`,
      transaction,
      count,
      enqueue
    }
  })
