/**
 * One schedule's due slots, decided in a transaction that holds its row (`FOR UPDATE SKIP
 * LOCKED`): each slot's message, its slot row and the schedule's moved cursor commit together,
 * so a slot is enqueued once however many processes race for it. The overlap policy is read
 * inside that transaction, against the messages of the schedule's latest slots.
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import { printable } from "@effect-durable/core/Printable"
import * as Effect from "effect/Effect"
import * as Lifecycle from "../queue/lifecycle.js"
import { isoUtc } from "../timestamps.js"
import * as Plan from "./plan.js"
import { iso, type Row, type Store, storedCron } from "./store.js"

/** Decides one schedule's slots due by `now`; how many it enqueued (0 when none were due or another process holds it). */
export type Decide = (name: string, now: Date) => Effect.Effect<number, DatabaseError>

export const make = (store: Store): Decide => {
  const { columns, count, decider, enqueue, schedules, settings, slots, sql, transaction } = store
  const outboxTable = sql.literal(settings.table("outbox"))
  const open = sql.literal(Lifecycle.make({ queue: "outbox", done: "projected_at" }, "o").open)
  const waiting = sql.literal(Lifecycle.make({ queue: "outbox", done: "projected_at" }, "o").is.ready)
  const delayed = sql.literal(Lifecycle.make({ queue: "outbox", done: "projected_at" }, "o").is.delayed)

  /** Whether the overlap policy lets a new slot's message in now (read inside the deciding transaction). */
  const overlapAllows = (row: Row) =>
    row.overlap === "allow"
      ? Effect.succeed(true)
      : Effect.map(
        sql<{ open: boolean; waiting: boolean }>`
          SELECT coalesce(bool_or(${open}), false) AS open,
                 coalesce(bool_or((${waiting}) OR (${delayed})), false) AS waiting
            FROM (SELECT message_id FROM ${slots}
                   WHERE schedule = ${row.name} AND message_id IS NOT NULL
                   ORDER BY slot DESC LIMIT 16) s
            JOIN ${outboxTable} o ON o.id = s.message_id`,
        ([state]) => row.overlap === "skip" ? !state!.open : !state!.waiting
      )

  return (name, now) =>
    transaction(
      "Schedules.decide",
      Effect.gen(function*() {
        const [row] = yield* sql<Row>`
          SELECT ${columns} FROM ${schedules}
           WHERE name = ${name} AND paused_at IS NULL AND next_slot <= ${iso(now)}::timestamptz
           FOR UPDATE SKIP LOCKED`
        if (row === undefined) return 0
        const cron = yield* storedCron(row)
        const decided = Plan.plan({
          cron,
          cursor: new Date(row.next_slot),
          now,
          catchUpMillis: row.catch_up_seconds * 1000,
          paused: false
        })
        // A slot already recorded (backfilled, or decided by a process of an earlier release)
        // is decided: it is passed over, never enqueued again (its slot row is unique).
        const recorded = decided.run.length === 0 ? new Set<number>() : new Set(
          (yield* sql<{ slot: string }>`
            SELECT ${sql.literal(isoUtc("slot"))} AS slot FROM ${slots}
             WHERE schedule = ${name} AND slot >= ${iso(decided.run[0]!)}::timestamptz
               AND slot <= ${iso(decided.run.at(-1)!)}::timestamptz`).map((r) => Date.parse(r.slot))
        )
        let enqueued = 0
        let skipped = 0
        for (const slot of decided.run) {
          if (recorded.has(slot.getTime())) continue
          if (yield* overlapAllows(row)) {
            const id = yield* enqueue(row, slot)
            yield* sql`INSERT INTO ${slots} (schedule, slot, outcome, message_id, decided_by)
                       VALUES (${name}, ${iso(slot)}::timestamptz, 'enqueued', ${id}::bigint, ${decider})`
            enqueued++
          } else {
            yield* sql`INSERT INTO ${slots} (schedule, slot, outcome, decided_by)
                       VALUES (${name}, ${iso(slot)}::timestamptz, 'skipped', ${decider})`
            skipped++
          }
        }
        const last = decided.run.at(-1)
        yield* sql`UPDATE ${schedules} SET next_slot = ${iso(decided.next)}::timestamptz,
                     enqueued = enqueued + ${enqueued}, skipped = skipped + ${skipped},
                     missed = missed + ${decided.missed},
                     last_slot = ${last === undefined ? null : iso(last)}::timestamptz, updated_at = now()
                    WHERE name = ${name}`
        if (decided.missed > 0) {
          yield* Effect.logWarning(
            `effect-durable schedule ${printable(name)}: ${
              decided.missedAtLeast ? "at least " : ""
            }${decided.missed} slot(s) missed (due before the catch-up window of ${row.catch_up_seconds} s)`
          )
        }
        yield* count(name, "enqueued", enqueued)
        yield* count(name, "skipped", skipped)
        yield* count(name, "missed", decided.missed)
        return enqueued
      })
    )
}
