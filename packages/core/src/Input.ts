/**
 * The rules every input is decoded by, in one place: bounded text, counts, durations and SQL
 * identifiers, as `Schema`s. Options are decoded once, when a layer is built, into
 * `DurableConfigError`; call arguments on every call into `InvalidInput`. Both name the
 * field (with the path inside it) and the rule it broke, so the message says what to fix.
 *
 * Durations are stricter than `Duration.fromInputUnsafe`, which reads `NaN`, `-1` and `"-5 seconds"`
 * as zero: here they are refused, as are infinite ones and those outside the rule's range.
 *
 * @since 0.1.0
 */
import type * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaGetter from "effect/SchemaGetter"
import * as SchemaIssue from "effect/SchemaIssue"
import { DurableConfigError, InvalidInput } from "./Errors.js"

const utf8Bytes = (text: string) => Buffer.byteLength(text, "utf8")

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/**
 * Whether `text` is well-formed UTF-16: no lone surrogate. One cannot be encoded as UTF-8, so
 * PostgreSQL would store U+FFFD in its place, and two different names would write one row.
 */
export const isWellFormed = (text: string): boolean => !LONE_SURROGATE.test(text)

/** A check that fails with `rule` as its message: the rule is what an error names. */
const rule = <T>(holds: (value: T) => boolean, message: string) =>
  Schema.makeFilter<T>((value) => holds(value) ? undefined : message, { message })

/**
 * A non-empty string of at most `maxBytes` UTF-8 bytes without NUL (PostgreSQL text cannot hold
 * NUL) or a lone surrogate (see `isWellFormed`).
 */
export const Text = (maxBytes: number): Schema.String =>
  Schema.String.check(
    rule(
      (text) => text.length > 0 && !text.includes("\u0000") && isWellFormed(text) && utf8Bytes(text) <= maxBytes,
      `a non-empty string of at most ${maxBytes} bytes without NUL or a lone surrogate`
    )
  )

/** Text that may be empty (an error message, a header value): at most `maxBytes`, no NUL, no lone surrogate. */
export const OptionalText = (maxBytes: number): Schema.String =>
  Schema.String.check(
    rule(
      (text) => !text.includes("\u0000") && isWellFormed(text) && utf8Bytes(text) <= maxBytes,
      `a string of at most ${maxBytes} bytes without NUL or a lone surrogate`
    )
  )

/** An integer from `min` (default 1) to `max`. */
export const Count = (max: number, min = 1): Schema.Number =>
  Schema.Number.check(rule((n) => Number.isInteger(n) && n >= min && n <= max, `an integer from ${min} to ${max}`))

/** Lowercase SQL identifier `[a-z_][a-z0-9_]*` of at most 63 bytes (PostgreSQL's NAMEDATALEN - 1). */
export const Identifier: Schema.String = Schema.String.check(
  rule(
    (name) => /^[a-z_][a-z0-9_]{0,62}$/.test(name),
    "a lowercase SQL identifier ([a-z_][a-z0-9_]*) of at most 63 bytes"
  )
)

/** An SQL identifier that keeps its case (it is always quoted): `[A-Za-z_][A-Za-z0-9_]*`, at most 63 bytes. */
export const MixedCaseIdentifier: Schema.String = Schema.String.check(
  rule(
    (name) => /^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(name),
    "an SQL identifier ([A-Za-z_][A-Za-z0-9_]*) of at most 63 bytes"
  )
)

// Duration.fromInput's own grammar, without its minus sign.
const DURATION_TEXT = /^\d+(?:\.\d+)?\s+(?:nanos?|micros?|millis?|seconds?|minutes?|hours?|days?|weeks?)$/

/** A `Duration.Input` read without `Duration.fromInput`'s leniency: negative, NaN or malformed is none. */
export const parseDuration = (input: unknown): Option.Option<Duration.Duration> => {
  if (Duration.isDuration(input)) return Duration.isNegative(input) ? Option.none() : Option.some(input)
  if (typeof input === "number") {
    return Number.isNaN(input) || input < 0
      ? Option.none()
      : Option.some(Duration.millis(input))
  }
  if (typeof input === "bigint") return input < 0n ? Option.none() : Option.some(Duration.nanos(input))
  if (typeof input === "string") {
    return DURATION_TEXT.test(input)
      ? Duration.fromInput(input as Duration.Input)
      : Option.none()
  }
  if (
    Array.isArray(input) && input.length === 2 &&
    input.every((part) => typeof part === "number" && !Number.isNaN(part) && part >= 0)
  ) return Duration.fromInput(input as [number, number])
  return Option.none()
}

/**
 * A duration in `[min, max]` (both `Duration.Input` text such as `"1 hour"`, named as written in
 * the rule). Without `min` it must be greater than zero; `min: 0` allows zero.
 */
export const DurationIn = (
  range: { readonly min?: string | 0; readonly max: string }
): Schema.Codec<Duration.Duration, unknown> => {
  const max = Duration.fromInputUnsafe(range.max as Duration.Input)
  const min = range.min === undefined || range.min === 0
    ? Duration.zero
    : Duration.fromInputUnsafe(range.min as Duration.Input)
  const inRange = range.min === undefined
    ? (d: Duration.Duration) => Duration.isGreaterThan(d, Duration.zero) && Duration.isLessThanOrEqualTo(d, max)
    : (d: Duration.Duration) => Duration.between(d, { minimum: min, maximum: max })
  const message = range.min === undefined
    ? `a duration greater than zero and at most ${range.max}`
    : `a duration from ${range.min === 0 ? "zero" : range.min} to ${range.max}`
  return Schema.Unknown.pipe(Schema.decodeTo(Schema.Duration, {
    decode: SchemaGetter.transformEffect((input: unknown) =>
      Option.match(Option.filter(parseDuration(input), (d) => Duration.isFinite(d) && inRange(d)), {
        onNone: () => Effect.fail(new SchemaIssue.InvalidValue({ message }, input)),
        onSome: Effect.succeed
      })
    ),
    encode: SchemaGetter.passthrough({ strict: false })
  }))
}

/**
 * Arguments are shallow records and lists. A value nested deeper than this (or cyclic) is
 * refused before any `Schema` sees it: formatting it into an error message would recurse
 * through every level and overflow the stack.
 */
const MAX_ARGUMENT_DEPTH = 32

const tooDeep = (value: unknown): boolean => {
  const stack: Array<readonly [unknown, number]> = [[value, 0]]
  const seen = new Set<object>()
  while (stack.length > 0) {
    const [current, depth] = stack.pop()!
    if (typeof current !== "object" || current === null) continue
    if (depth >= MAX_ARGUMENT_DEPTH || seen.has(current)) return true
    seen.add(current)
    // Only plain records and lists are walked: a class instance (a Schema, a Date) is a leaf.
    const prototype = Object.getPrototypeOf(current)
    if (!Array.isArray(current) && prototype !== Object.prototype && prototype !== null) continue
    for (const key of Object.keys(current)) stack.push([(current as Record<string, unknown>)[key], depth + 1])
  }
  return false
}

const formatIssues = SchemaIssue.makeFormatterStandardSchemaV1()

const firstIssue = (error: Schema.SchemaError) => {
  const issue = formatIssues(error.issue).issues[0]
  const path = (issue?.path ?? [])
    .map((segment) => typeof segment === "object" ? segment.key : segment)
    .map((key) => typeof key === "number" ? `[${key}]` : `.${String(key)}`).join("")
  return { path, rule: issue?.message ?? error.message }
}

/**
 * A decoder of one call argument: the value or `InvalidInput` naming the argument (and the
 * path inside it). Build it once, outside the call: the schema is compiled here. `exact`: a
 * field the argument's schema does not know is refused, naming it — for an argument where a
 * typo (`topics` for `topic`) would pass for "no filter" (a bulk discard of every dead letter).
 */
export const argumentResult = <A>(
  name: string,
  schema: Schema.Decoder<A>,
  options: { readonly exact?: boolean } = {}
) => {
  const decode = Schema.decodeUnknownResult(schema, {
    errors: "first",
    ...(options.exact === true ? { onExcessProperty: "error" as const } : {})
  })
  return (value: unknown): Result.Result<A, InvalidInput> =>
    tooDeep(value)
      ? Result.fail(
        new InvalidInput({
          argument: name,
          rule: `a value nested at most ${MAX_ARGUMENT_DEPTH} levels, without cycles`
        })
      )
      : Result.mapError(decode(value), (error) => {
        const { path, rule } = firstIssue(error)
        return new InvalidInput({ argument: `${name}${path}`, rule })
      })
}

/** `argumentResult` as an Effect, for the `yield*` of a service method. */
export const argument = <A>(name: string, schema: Schema.Decoder<A>, options: { readonly exact?: boolean } = {}) => {
  const decode = argumentResult(name, schema, options)
  return (value: unknown): Effect.Effect<A, InvalidInput> => Effect.fromResult(decode(value))
}

/** A decoder of an options object: the decoded options or `DurableConfigError` naming the field. */
export const options = <A>(schema: Schema.Decoder<A>, prefix?: string) => {
  const decode = Schema.decodeUnknownResult(schema, { errors: "first", onExcessProperty: "error" })
  return (value: unknown): Effect.Effect<A, DurableConfigError> =>
    Effect.fromResult(
      tooDeep(value)
        ? Result.fail(
          new DurableConfigError({
            field: prefix ?? "options",
            rule: `nested at most ${MAX_ARGUMENT_DEPTH} levels, without cycles`
          })
        )
        : Result.mapError(decode(value), (error) => {
          const { path, rule } = firstIssue(error)
          const field = `${prefix ?? ""}${path}`.replace(/^\./, "")
          return new DurableConfigError({ field: field.length === 0 ? "options" : field, rule })
        })
    )
}

/** What a configuration variable is for, and a value that works: said when it is missing or wrong. */
export interface VariableHint {
  readonly purpose: string
  readonly example: string
}

/**
 * A configuration value that could not be read (missing, not a number...), as the
 * `DurableConfigError` an invalid option gives, naming the variable — and, when `hints` know
 * it, what it is for and an example value.
 */
export const configError = (
  error: Config.ConfigError,
  hints: Readonly<Record<string, VariableHint>> = {}
): DurableConfigError => {
  const { path, rule: message } = error.cause._tag === "SchemaError"
    ? firstIssue(error.cause)
    : { path: "", rule: error.cause.message }
  const field = path.replace(/^\./, "") || "config"
  const hint = hints[field]
  return new DurableConfigError({
    field,
    rule: hint === undefined ? message : `${message} — ${hint.purpose}, e.g. ${field}=${hint.example}`
  })
}

/**
 * A `DurableConfigError` from decoding options read from configuration, renamed to the
 * variable the field came from (`poolSize` -> `DURABLE_POOL_SIZE`), with its hint.
 */
export const fromVariable = (
  error: DurableConfigError,
  variables: Readonly<Record<string, string>>,
  hints: Readonly<Record<string, VariableHint>> = {}
): DurableConfigError => {
  const variable = variables[error.field] ?? variables[error.field.split(/[.[]/)[0]!]
  if (variable === undefined) return error
  const hint = hints[variable]
  return new DurableConfigError({
    field: variable,
    rule: hint === undefined ? error.rule : `${error.rule} — ${hint.purpose}, e.g. ${variable}=${hint.example}`
  })
}
