/**
 * Schedules: a cron expression (5 or 6 fields, in a time zone, daylight saving included) that
 * enqueues one outbox message per slot, across any number of processes and with no leader.
 * Every process that runs `layerRunner` decides the slots that fall due, each schedule in a
 * transaction that holds its row: the slot's message, its slot row (unique per schedule and
 * slot) and the schedule's cursor commit together, so a slot is enqueued once however many
 * processes race for it, and a process that dies mid-way leaves it to the next.
 *
 * - **Overlap** (when the previous slot's message is still open): `skip` (the default: no new
 *   message while one is open), `buffer-one` (a new one only while none waits undelivered:
 *   one running and one queued at most), `allow` (one per slot, always).
 * - **Catch-up** after downtime: slots due longer ago than the catch-up window (default one
 *   hour) when a process decides them are missed, the later ones run (through the overlap
 *   policy). **Backfill** enqueues each slot of a range that has no message yet.
 * - **Pause** and resume: slots passing while paused are missed; resume starts again at the
 *   next slot. Missed, skipped, enqueued and backfilled slots are counted on the schedule and
 *   in `effect_durable_schedule_slots`.
 *
 * Slots fall due by the deciding process's clock (Effect's `Clock`: `TestClock` drives it in
 * tests); keep the processes' clocks in sync. The message carries the slot in its headers
 * (`schedule`, `schedule-slot`, ISO-8601 UTC).
 *
 * @since 0.2.0
 */
import { type DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import { canonicalize } from "@effect-durable/core/Fingerprint"
import * as Input from "@effect-durable/core/Input"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Cron from "effect/Cron"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type * as SqlClient from "effect/sql/SqlClient"
import type { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import * as Decide from "./internal/schedules/decide.js"
import * as Plan from "./internal/schedules/plan.js"
import * as Runner from "./internal/schedules/runner.js"
import * as Store from "./internal/schedules/store.js"
import { isoUtc } from "./internal/timestamps.js"
import type * as Outbox from "./Outbox.js"

export const OVERLAPS = ["skip", "buffer-one", "allow"] as const
export type Overlap = typeof OVERLAPS[number]

export interface ScheduleDefinition {
  /** 1-128 bytes; the schedule's identity (a second definition of the name replaces the first). */
  readonly name: string
  /** 5 fields (minute precision) or 6 (seconds first), as Effect's `Cron.parse` reads them. */
  readonly cron: string
  /** An IANA time zone (`Europe/Berlin`). Default `UTC`. */
  readonly timeZone?: string
  /** The topic of the message each slot enqueues. */
  readonly topic: string
  /** Its payload (JSON). Default `{}`. */
  readonly payload?: unknown
  /** Its ordering key, if any. */
  readonly orderingKey?: string
  /** When the previous slot's message is still open. Default `skip`. */
  readonly overlap?: Overlap
  /** Slots due longer ago than this when decided are missed. Default one hour; zero: only on time. */
  readonly catchUp?: Duration.Input
}

export interface ScheduleInfo {
  readonly name: string
  readonly cron: string
  readonly timeZone: string
  readonly topic: string
  readonly orderingKey: string | null
  readonly overlap: Overlap
  readonly catchUpSeconds: number
  /** The first slot not yet decided (ISO-8601 UTC). */
  readonly nextSlot: string
  /** The latest slot decided, if any. */
  readonly lastSlot: string | null
  readonly paused: boolean
  readonly pausedBy: string | null
  readonly enqueued: number
  readonly skipped: number
  readonly missed: number
  readonly backfilled: number
}

export interface Backfilled {
  /** Slots of the range that got a message now. */
  readonly enqueued: number
  /** Slots of the range that already had one (or were skipped by the overlap policy). */
  readonly present: number
}

export class Schedules extends Context.Service<Schedules, {
  /** Creates or replaces a schedule. A changed cron or time zone restarts it at its next slot. */
  readonly define: (definition: ScheduleDefinition) => Effect.Effect<void, InvalidInput | DatabaseError>
  /** Deletes a schedule (its slot history too); whether it existed. */
  readonly remove: (name: string) => Effect.Effect<boolean, InvalidInput | DatabaseError>
  readonly list: Effect.Effect<ReadonlyArray<ScheduleInfo>, DatabaseError>
  /** Pauses a schedule: its slots are missed until it is resumed. Whether it was running. */
  readonly pause: (
    name: string,
    options?: { readonly by?: string }
  ) => Effect.Effect<boolean, InvalidInput | DatabaseError>
  /** Resumes a paused schedule at its next slot (those passed meanwhile counted missed). Whether it was paused. */
  readonly resume: (name: string) => Effect.Effect<boolean, InvalidInput | DatabaseError>
  /**
   * Enqueues each slot in `[from, to)` that has no message yet (at most `MAX_BACKFILL` slots,
   * in one transaction), whatever the overlap policy says.
   */
  readonly backfill: (
    name: string,
    range: { readonly from: Date; readonly to: Date }
  ) => Effect.Effect<Backfilled, InvalidInput | DatabaseError>
  /** Decides every schedule due by now (what the runner does at each slot); how many slots it enqueued. */
  readonly decideDue: Effect.Effect<number, DatabaseError>
  /** When the next unpaused schedule falls due (epoch ms), if any. */
  readonly nextDue: Effect.Effect<number | undefined, DatabaseError>
}>()("@effect-durable/pg/Schedules") {}

/** The most slots one backfill enqueues. */
export const MAX_BACKFILL = 10_000

export const metrics = {
  slots: Metric.counter("effect_durable_schedule_slots", {
    description: "schedule slots by outcome: enqueued, skipped (overlap), missed, backfilled"
  })
}

const decodeName = Input.argument("name", Input.Text(128))
const decodeTopic = Input.argument("topic", Input.Text(128))
const decodeOrderingKey = Input.argument("orderingKey", Input.Text(256))
const decodeOverlap = Input.argument("overlap", Schema.Literals(OVERLAPS))
const decodeCatchUp = Input.argument("catchUp", Input.DurationIn({ min: 0, max: "365 days" }))
const decodeBy = Input.argument("by", Input.Text(128))
const decodeCronText = Input.argument("cron", Input.Text(256))
const decodeTimeZone = Input.argument("timeZone", Input.Text(64))

/** A cron expression in a time zone, or the rule it breaks. */
const parseCron = (cron: string, timeZone: string): Effect.Effect<Cron.Cron, InvalidInput> =>
  Effect.gen(function*() {
    const text = yield* decodeCronText(cron)
    const zone = yield* decodeTimeZone(timeZone)
    const parsed = Cron.parse(text, zone)
    if (Result.isSuccess(parsed)) {
      // A date that never comes (`0 0 30 2 *`) parses, but has no next slot: refused here, not
      // left to fail every decision.
      const next = Result.try(() => Cron.next(parsed.success))
      if (Result.isSuccess(next)) return parsed.success
      return yield* new InvalidInput({
        argument: "cron",
        rule: "a cron expression whose dates come (this one matches no date)"
      })
    }
    // Said as the rule: which of the two is wrong.
    const valid = Cron.parse(text, "UTC")
    return yield* Result.isFailure(valid)
      ? new InvalidInput({ argument: "cron", rule: `a cron expression of 5 or 6 fields (${valid.failure.message})` })
      : new InvalidInput({ argument: "timeZone", rule: "an IANA time zone such as Europe/Berlin" })
  })

const decodeDate = (argument: string, value: Date) =>
  value instanceof Date && Number.isFinite(value.getTime())
    ? Effect.succeed(value)
    : Effect.fail(new InvalidInput({ argument, rule: "a valid Date" }))

export const make: Effect.Effect<
  Schedules["Service"],
  never,
  SqlClient.SqlClient | DurableSettings | Outbox.Outbox
> = Effect.gen(function*() {
  const store = yield* Store.make(metrics.slots)
  const { columns, count, decider, enqueue, schedules, slots, sql, transaction } = store
  const iso = Store.iso
  const storedCron = Store.storedCron
  // The runner's pass over due schedules is a service operation too (`decideDue`, `nextDue`).
  const { decideDue, nextDue } = Runner.makePass(store, Decide.make(store))

  const define = Effect.fn("Schedules.define")(function*(definition: ScheduleDefinition) {
    const name = yield* decodeName(definition.name)
    const timeZone = definition.timeZone ?? "UTC"
    const cron = yield* parseCron(definition.cron, timeZone)
    const topic = yield* decodeTopic(definition.topic)
    const orderingKey = definition.orderingKey === undefined ? null : yield* decodeOrderingKey(definition.orderingKey)
    const overlap = yield* decodeOverlap(definition.overlap ?? "skip")
    const catchUp = yield* decodeCatchUp(definition.catchUp ?? "1 hour")
    const payload = yield* Effect.mapError(
      canonicalize(definition.payload ?? {}),
      (error) => new InvalidInput({ argument: "payload", rule: error.message })
    )
    const next = Cron.next(cron, new Date(yield* Clock.currentTimeMillis))
    // A changed cron or time zone restarts the schedule at its next slot; anything else keeps its cursor.
    yield* sql`
      INSERT INTO ${schedules} (name, cron, time_zone, topic, payload, ordering_key, overlap, catch_up_seconds, next_slot)
      VALUES (${name}, ${definition.cron}, ${timeZone}, ${topic}, ${payload}::jsonb, ${orderingKey}, ${overlap},
              ${Duration.toMillis(catchUp) / 1000}, ${iso(next)}::timestamptz)
      ON CONFLICT (name) DO UPDATE SET
        topic = EXCLUDED.topic, payload = EXCLUDED.payload, ordering_key = EXCLUDED.ordering_key,
        overlap = EXCLUDED.overlap, catch_up_seconds = EXCLUDED.catch_up_seconds,
        next_slot = CASE WHEN ${schedules}.cron = EXCLUDED.cron AND ${schedules}.time_zone = EXCLUDED.time_zone
                         THEN ${schedules}.next_slot ELSE EXCLUDED.next_slot END,
        cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone, updated_at = now()`.pipe(
      classifySqlErrors("Schedules.define")
    )
  })

  const remove = Effect.fn("Schedules.remove")(function*(name: string) {
    const decoded = yield* decodeName(name)
    return yield* transaction(
      "Schedules.remove",
      Effect.gen(function*() {
        yield* sql`DELETE FROM ${slots} WHERE schedule = ${decoded}`
        const rows = yield* sql`DELETE FROM ${schedules} WHERE name = ${decoded} RETURNING name`
        return rows.length > 0
      })
    )
  })

  const list = sql<Store.Row>`SELECT ${columns} FROM ${schedules} ORDER BY name`.pipe(
    Effect.map((rows) =>
      rows.map((row): ScheduleInfo => ({
        name: row.name,
        cron: row.cron,
        timeZone: row.time_zone,
        topic: row.topic,
        orderingKey: row.ordering_key,
        overlap: row.overlap,
        catchUpSeconds: row.catch_up_seconds,
        nextSlot: row.next_slot,
        lastSlot: row.last_slot,
        paused: row.paused,
        pausedBy: row.paused_by,
        enqueued: Number(row.enqueued),
        skipped: Number(row.skipped),
        missed: Number(row.missed),
        backfilled: Number(row.backfilled)
      }))
    ),
    classifySqlErrors("Schedules.list")
  )

  const pause = Effect.fn("Schedules.pause")(function*(name: string, options: { readonly by?: string } = {}) {
    const decoded = yield* decodeName(name)
    const by = options.by === undefined ? null : yield* decodeBy(options.by)
    const rows = yield* sql`UPDATE ${schedules} SET paused_at = now(), paused_by = ${by}, updated_at = now()
                             WHERE name = ${decoded} AND paused_at IS NULL RETURNING name`.pipe(
      classifySqlErrors("Schedules.pause")
    )
    return rows.length > 0
  })

  const resume = Effect.fn("Schedules.resume")(function*(name: string) {
    const decoded = yield* decodeName(name)
    const now = new Date(yield* Clock.currentTimeMillis)
    return yield* transaction(
      "Schedules.resume",
      Effect.gen(function*() {
        const [row] = yield* sql<Store.Row>`SELECT ${columns} FROM ${schedules}
                                       WHERE name = ${decoded} AND paused_at IS NOT NULL FOR UPDATE`
        if (row === undefined) return false
        const cron = yield* storedCron(row)
        const passed = Plan.plan({
          cron,
          cursor: new Date(row.next_slot),
          now,
          catchUpMillis: 0,
          paused: true
        })
        yield* sql`UPDATE ${schedules} SET paused_at = NULL, paused_by = NULL, missed = missed + ${passed.missed},
                     next_slot = ${iso(passed.next)}::timestamptz, updated_at = now()
                    WHERE name = ${decoded}`
        yield* count(decoded, "missed", passed.missed)
        return true
      })
    )
  })

  const backfill = Effect.fn("Schedules.backfill")(
    function*(name: string, range: { readonly from: Date; readonly to: Date }) {
      const decoded = yield* decodeName(name)
      const from = yield* decodeDate("from", range.from)
      const to = yield* decodeDate("to", range.to)
      if (from.getTime() >= to.getTime()) {
        return yield* new InvalidInput({ argument: "to", rule: "after from" })
      }
      return yield* transaction(
        "Schedules.backfill",
        Effect.gen(function*() {
          const [row] = yield* sql<Store.Row>`SELECT ${columns} FROM ${schedules} WHERE name = ${decoded} FOR UPDATE`
          if (row === undefined) {
            return yield* new InvalidInput({ argument: "name", rule: `a defined schedule (no schedule ${decoded})` })
          }
          // Slots from the cursor on are the runner's to decide: a backfill into them would
          // enqueue early what the runner then finds decided.
          if (to.getTime() > Date.parse(row.next_slot)) {
            return yield* new InvalidInput({
              argument: "to",
              rule: `at or before the schedule's next slot (${row.next_slot}): later slots are the runner's`
            })
          }
          const cron = yield* storedCron(row)
          const wanted: Array<Date> = []
          for (
            let slot = Plan.firstFrom(cron, from);
            slot.getTime() < to.getTime();
            slot = Cron.next(cron, slot)
          ) {
            if (wanted.length === MAX_BACKFILL) {
              return yield* new InvalidInput({
                argument: "to",
                rule: `a range of at most ${MAX_BACKFILL} slots of this schedule`
              })
            }
            wanted.push(slot)
          }
          const present = new Set(
            (yield* sql<{ slot: string }>`
              SELECT ${sql.literal(isoUtc("slot"))} AS slot FROM ${slots}
               WHERE schedule = ${decoded} AND slot >= ${iso(from)}::timestamptz AND slot < ${iso(to)}::timestamptz`)
              .map((r) => Date.parse(r.slot))
          )
          let enqueued = 0
          for (const slot of wanted) {
            if (present.has(slot.getTime())) continue
            const id = yield* enqueue(row, slot)
            yield* sql`INSERT INTO ${slots} (schedule, slot, outcome, message_id, decided_by)
                       VALUES (${decoded}, ${iso(slot)}::timestamptz, 'backfilled', ${id}::bigint, ${decider})`
            enqueued++
          }
          yield* sql`UPDATE ${schedules} SET backfilled = backfilled + ${enqueued}, updated_at = now()
                      WHERE name = ${decoded}`
          yield* count(decoded, "backfilled", enqueued)
          return { enqueued, present: wanted.length - enqueued }
        })
      )
    }
  )

  return Schedules.of({ define, remove, list, pause, resume, backfill, decideDue, nextDue })
})

/** The service over the substrate (`Durable.layer` provides what it needs). */
export const layer: Layer.Layer<Schedules, never, SqlClient.SqlClient | DurableSettings | Outbox.Outbox> = Layer
  .effect(Schedules, make)

export interface RunnerOptions {
  /** Schedules to define at start (create or replace), before the first decision. */
  readonly schedules?: ReadonlyArray<ScheduleDefinition>
  /**
   * The longest sleep between two looks at the table (schedules defined, resumed or changed
   * by other processes are seen within it). Default 10 seconds.
   */
  readonly pollInterval?: Duration.Input
}

/**
 * Runs the scheduler in this process for as long as the layer lives: defines `schedules`, then
 * decides each slot as it falls due (every process may run one: each slot is enqueued once).
 * A failed decision (the database away) is logged and tried again at the next look.
 */
export const layerRunner = (
  options: RunnerOptions = {}
): Layer.Layer<Schedules, InvalidInput | DatabaseError, SqlClient.SqlClient | DurableSettings | Outbox.Outbox> =>
  Layer.effect(
    Schedules,
    Effect.gen(function*() {
      const service = yield* make
      yield* Runner.start(service, options)
      return service
    })
  )
