/**
 * Flags several commands share, each defined once: `--json`, `--yes`, durations written the
 * way operators write them (`7d`, `12h`, `30m`, or the library's `"7 days"`), message ids, and
 * the confirmation a bulk action asks for (refused, never hung, when nobody can answer it).
 */
import { printable } from "@effect-durable/core/Printable"
import * as Flag from "effect/cli/Flag"
import * as Prompt from "effect/cli/Prompt"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { parseDuration } from "./durations.js"
import { invalidValue, usage } from "./errors.js"
import { isMessageId, MAX_MESSAGE_ID } from "./ids.js"

export const json = Flag.Boolean("json").pipe(
  Flag.withDefault(false),
  Flag.withDescription("Print the result as JSON on stdout")
)

export const yes = Flag.Boolean("yes").pipe(
  Flag.withAlias("y"),
  Flag.withDefault(false),
  Flag.withDescription("Do not ask for confirmation")
)

/** An on/off flag, off unless given. */
export const toggle = (name: string, description: string) =>
  Flag.Boolean(name).pipe(Flag.withDefault(false), Flag.withDescription(description))

/** A duration flag: `--older-than 7d`. */
export const duration = (name: string) =>
  Flag.String(name).pipe(
    Flag.withMetavar("DURATION"),
    Flag.mapEffect((text) => {
      const parsed = parseDuration(text)
      return parsed === undefined
        ? Effect.fail(invalidValue(`--${name} expects a duration such as 30m, 12h, 7d or "2 days", got '${text}'`))
        : Effect.succeed<Duration.Input>(parsed)
    })
  )

/** `--id 12 --id 13` (none: an empty list). Parsed as text, checked here: ids are int8. */
export const ids = Flag.String("id").pipe(
  Flag.atLeast(0),
  Flag.mapEffect((raw) => {
    const bad = raw.find((id) => !isMessageId(id))
    return bad === undefined
      ? Effect.succeed(raw)
      : Effect.fail(
        invalidValue(`--id expects a message id (a positive integer up to ${MAX_MESSAGE_ID}), got '${printable(bad)}'`)
      )
  }),
  Flag.withMetavar("ID"),
  Flag.withDescription("A message id; repeat it for several (--id 12 --id 13)")
)

/** A positive integer flag with a default; its help says the range and the default. */
export const positive = (name: string, fallback: number, max: number, description: string) =>
  Flag.Int(name).pipe(
    Flag.withMetavar("N"),
    Flag.withDescription(`${description} (1 to ${max}; default ${fallback})`),
    Flag.withDefault(fallback),
    Flag.mapEffect((n) =>
      Number.isInteger(n) && n >= 1 && n <= max
        ? Effect.succeed(n)
        : Effect.fail(invalidValue(`--${name} expects an integer from 1 to ${max}, got ${n}`))
    )
  )

/**
 * Asks before a bulk change unless `--yes`. Without a terminal to ask on (a script, CI, a
 * pipe) it refuses at once instead of waiting for an answer that never comes.
 */
export const confirm = Effect.fnUntraced(function*(assumeYes: boolean, question: string) {
  if (assumeYes) return
  if (!process.stdin.isTTY || !process.stdout.isTTY) {
    return yield* usage(`${question} Refusing without --yes: there is no terminal to ask on.`)
  }
  const answer = yield* Prompt.run(Prompt.Confirm({ message: question, initial: false }))
  if (!answer) return yield* usage("not confirmed; nothing changed")
})
