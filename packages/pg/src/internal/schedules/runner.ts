/**
 * The runner: a pass decides every schedule due by the process's clock (each in its own
 * transaction, see `decide.ts`), and a loop scoped to the runner's layer repeats the pass when
 * the next schedule falls due or at the poll interval, whichever comes first. A failed pass
 * (the database away) is logged and tried again at the next look; it never ends the loop.
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import { printable } from "@effect-durable/core/Printable"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { classifySqlErrors } from "../../ErrorClassification.js"
import type { RunnerOptions, Schedules } from "../../Schedules.js"
import { isoUtc } from "../timestamps.js"
import type { Decide } from "./decide.js"
import { iso, type Store } from "./store.js"

export interface Pass {
  /** Decides every schedule due by now; how many slots it enqueued. */
  readonly decideDue: Effect.Effect<number, DatabaseError>
  /** When the next unpaused schedule falls due (epoch ms), if any. */
  readonly nextDue: Effect.Effect<number | undefined, DatabaseError>
}

export const makePass = (store: Store, decide: Decide): Pass => {
  const { schedules, sql } = store

  const decideDue = Effect.gen(function*() {
    const now = new Date(yield* Clock.currentTimeMillis)
    const due = yield* sql<{ name: string }>`
      SELECT name FROM ${schedules} WHERE paused_at IS NULL AND next_slot <= ${iso(now)}::timestamptz
       ORDER BY next_slot`.pipe(classifySqlErrors("Schedules.decideDue"))
    let enqueued = 0
    // One schedule's failure (its stored cron no longer evaluates, a constraint its slot breaks)
    // is logged with its name and never stops the others, due after it in the same pass.
    for (const { name } of due) {
      enqueued += yield* decide(name, now).pipe(
        Effect.catchCause((cause) =>
          Effect.as(
            Effect.logWarning(
              `effect-durable schedule ${printable(name)}: its decision failed, the other schedules go on`,
              cause
            ),
            0
          )
        )
      )
    }
    return enqueued
  }).pipe(Effect.withSpan("Schedules.decideDue"))

  const nextDue = sql<{ due: string | null }>`
    SELECT ${sql.literal(isoUtc("min(next_slot)"))} AS due FROM ${schedules} WHERE paused_at IS NULL`.pipe(
    Effect.map(([row]) => row?.due == null ? undefined : new Date(row.due).getTime()),
    classifySqlErrors("Schedules.nextDue")
  )

  return { decideDue, nextDue }
}

const decodePollInterval = Input.argument("pollInterval", Input.DurationIn({ min: "10 millis", max: "1 hour" }))

/**
 * Defines the runner's schedules, then forks the loop into the layer's scope: decide what is
 * due, sleep until the next schedule falls due (at most the poll interval), again.
 */
export const start = (
  service: Schedules["Service"],
  options: RunnerOptions
): Effect.Effect<void, InvalidInput | DatabaseError, Scope.Scope> =>
  Effect.gen(function*() {
    const poll = Duration.toMillis(yield* decodePollInterval(options.pollInterval ?? "10 seconds"))
    for (const definition of options.schedules ?? []) yield* service.define(definition)
    const look = Effect.gen(function*() {
      yield* service.decideDue
      const due = yield* service.nextDue
      const now = yield* Clock.currentTimeMillis
      return due === undefined ? poll : Math.min(poll, Math.max(0, due - now))
    }).pipe(
      Effect.catchTag(
        "DatabaseError",
        (error) =>
          Effect.as(Effect.logWarning(`effect-durable schedules: ${printable(error.message)}; trying again`), poll)
      )
    )
    yield* Effect.forkScoped(
      Effect.forever(Effect.flatMap(look, (millis) => Effect.sleep(Duration.millis(millis))))
    )
  })
