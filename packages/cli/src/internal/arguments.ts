/**
 * Options several commands share, each defined once: `--json`, `--yes`, durations written the
 * way operators write them (`7d`, `12h`, `30m`, or the library's `"7 days"`), message ids, and
 * the confirmation a bulk action asks for (refused, never hung, when nobody can answer it).
 */
import { HelpDoc, Options, Prompt, ValidationError } from "@effect/cli"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { parseDuration } from "./durations.js"
import { usage } from "./errors.js"

export const json = Options.boolean("json").pipe(Options.withDescription("Print the result as JSON on stdout"))

export const yes = Options.boolean("yes").pipe(
  Options.withAlias("y"),
  Options.withDescription("Do not ask for confirmation")
)

const invalid = (message: string) => ValidationError.invalidValue(HelpDoc.p(message))

/** A duration option: `--older-than 7d`. */
export const duration = (name: string) =>
  Options.text(name).pipe(
    Options.withPseudoName("DURATION"),
    Options.mapEffect((text) => {
      const parsed = parseDuration(text)
      return parsed === undefined
        ? Effect.fail(invalid(`--${name} expects a duration such as 30m, 12h, 7d or "2 days", got '${text}'`))
        : Effect.succeed<Duration.Input>(parsed)
    })
  )

/**
 * `--id 12 --id 13`. Parsed as text: `Options.integer(...).pipe(Options.repeated)` of
 * @effect/cli 0.77.2 rejects a single occurrence.
 */
export const ids = Options.text("id").pipe(
  Options.repeated,
  Options.mapEffect((raw) => {
    const bad = raw.find((id) => !/^[1-9][0-9]{0,18}$/.test(id))
    return bad === undefined ? Effect.succeed(raw) : Effect.fail(invalid(`--id expects a message id (a positive integer), got '${bad}'`))
  }),
  Options.withPseudoName("ID"),
  Options.withDescription("A message id; repeat it for several (--id 12 --id 13)")
)

/** A positive integer option with a default. */
export const positive = (name: string, fallback: number, max: number) =>
  Options.integer(name).pipe(
    Options.withDefault(fallback),
    Options.mapEffect((n) =>
      Number.isInteger(n) && n >= 1 && n <= max
        ? Effect.succeed(n)
        : Effect.fail(invalid(`--${name} expects an integer from 1 to ${max}, got ${n}`))
    )
  )

/**
 * Asks before a bulk change unless `--yes`. Without a terminal to ask on (a script, CI, a
 * pipe) it refuses at once instead of waiting for an answer that never comes.
 */
export const confirm = (assumeYes: boolean, question: string) =>
  Effect.gen(function*() {
    if (assumeYes) return
    if (!process.stdin.isTTY || !process.stdout.isTTY) {
      return yield* usage(`${question} Refusing without --yes: there is no terminal to ask on.`)
    }
    const answer = yield* Prompt.confirm({ message: question, initial: false })
    if (!answer) return yield* usage("not confirmed; nothing changed")
  })
