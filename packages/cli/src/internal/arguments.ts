/**
 * Flags several commands share, each defined once: `--json`, `--yes`, durations written the
 * way operators write them (`7d`, `12h`, `30m`, or the library's `"7 days"`), message ids, and
 * the confirmation a bulk action asks for (refused, never hung, when nobody can answer it).
 */
import * as Input from "@effect-durable/core/Input"
import { printable } from "@effect-durable/core/Printable"
import * as Flag from "effect/cli/Flag"
import * as Prompt from "effect/cli/Prompt"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import type * as Schema from "effect/Schema"
import { parseDuration } from "./durations.js"
import { type CommandError, invalidValue, usage } from "./errors.js"
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

/** A duration flag: `--older-than 7d`. Never negative: `-12h` is refused naming the flag. */
export const duration = (name: string) =>
  Flag.String(name).pipe(
    Flag.withMetavar("DURATION"),
    Flag.mapEffect((text) => {
      const parsed = parseDuration(text)
      return parsed === undefined
        ? Effect.fail(
          invalidValue(
            `--${name} expects a duration of zero or more, such as 30m, 12h, 7d or "2 days", got '${printable(text)}'`
          )
        )
        : Effect.succeed<Duration.Input>(parsed)
    })
  )

/**
 * A duration flag's range, checked by `rule` (an `Input.DurationIn`, the library's own where
 * there is one), after its default: `duration("interval").pipe(Flag.withDefault(...), within(...))`.
 */
export const within = (name: string, rule: Schema.Decoder<Duration.Duration>) => {
  const decode = Input.argumentResult(`--${name}`, rule)
  return Flag.mapEffect((input: Duration.Input) =>
    Result.match(decode(input), {
      onFailure: (error) =>
        Effect.fail(invalidValue(`--${name} expects ${error.rule}, got ${printable(String(input))}`)),
      onSuccess: () => Effect.succeed(input)
    })
  )
}

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

// ISO-8601's extended format with its offset: what `new Date` reads, but nothing it would roll
// over (February 30th is March 2nd to it) and no local time (it would depend on the machine).
const INSTANT = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?(?:Z|([+-])(\d{2}):(\d{2}))$/

/** The rule a time given to the command meets. */
export const INSTANT_RULE =
  "an ISO-8601 time that exists, with its offset, such as 2026-12-01T00:00:00Z or 2026-12-01T09:30:00+01:00"

const daysIn = (year: number, month: number) =>
  month === 2
    ? (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28
    : [4, 6, 9, 11].includes(month)
    ? 30
    : 31

/** `2026-12-01T00:00:00Z` as a `Date`; a time that does not exist, or is not written so, is `undefined`. */
export const parseInstant = (text: string): Date | undefined => {
  const parts = INSTANT.exec(text)
  if (parts === null) return undefined
  const [year, month, day, hour, minute, second = 0] = parts.slice(1, 7).map((part) =>
    part === undefined ? undefined : Number(part)
  ) as [number, number, number, number, number, number | undefined]
  const millis = Number((parts[7] ?? "").padEnd(3, "0"))
  const sign = parts[8] === "-" ? -1 : 1
  const [offsetHours, offsetMinutes] = [Number(parts[9] ?? 0), Number(parts[10] ?? 0)]
  const exists = month >= 1 && month <= 12 && day >= 1 && day <= daysIn(year, month) && hour <= 23 &&
    minute <= 59 && second <= 59 && offsetHours <= 23 && offsetMinutes <= 59
  if (!exists) return undefined
  // setUTCFullYear, not Date.UTC: the latter reads years 0-99 as 1900-1999.
  const at = new Date(0)
  at.setUTCFullYear(year, month - 1, day)
  at.setUTCHours(hour, minute, second, millis)
  return new Date(at.getTime() - sign * (offsetHours * 60 + offsetMinutes) * 60_000)
}

/** A time flag: `--from 2026-12-01T00:00:00Z`, strictly ISO-8601 (see `parseInstant`). */
export const instant = (name: string, description: string) =>
  Flag.String(name).pipe(
    Flag.withMetavar("TIME"),
    Flag.withDescription(description),
    Flag.mapEffect((text) => {
      const at = parseInstant(text)
      return at === undefined
        ? Effect.fail(invalidValue(`--${name} expects ${INSTANT_RULE}, got '${printable(text)}'`))
        : Effect.succeed(at)
    })
  )

// What effect/cli's lexer splits into short flags though no flag of ours is a digit or a dot
// (`-12h` is -1, -2 and -h: the help, exit 0, nothing done); plain numbers (`-3`) it passes as values.
const DASH_VALUE = /^-[\d.]/
const NUMBER = /^-(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/

/**
 * The command line with every argument that starts with `-` and a digit or a dot read as a
 * value: after a long flag it becomes that flag's (`--older-than -12h` is
 * `--older-than=-12h`, which the flag's own check refuses, naming it); anywhere else it is
 * refused here. Arguments after `--` are left as they are.
 */
export const dashValues = (argv: ReadonlyArray<string>): Result.Result<ReadonlyArray<string>, CommandError> => {
  const out: Array<string> = []
  for (const [i, arg] of argv.entries()) {
    if (arg === "--") return Result.succeed([...out, ...argv.slice(i)])
    const previous = out[out.length - 1]
    if (!DASH_VALUE.test(arg) || NUMBER.test(arg)) out.push(arg)
    else if (previous !== undefined && /^--[^=]+$/.test(previous)) out[out.length - 1] = `${previous}=${arg}`
    else {
      return Result.fail(usage(
        `'${printable(arg)}' is not a flag: a value that starts with '-' goes right after its flag ` +
          `with '=' (--flag=${printable(arg)}), an argument after '--'`
      ))
    }
  }
  return Result.succeed(out)
}
