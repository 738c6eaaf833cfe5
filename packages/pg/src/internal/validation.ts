/** Input rules shared by every service: bounded text, counts, durations. */
import { DurableConfigError } from "@effect-durable/core/Errors"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"

/** A non-empty string of at most `maxBytes` UTF-8 bytes without NUL (PostgreSQL text cannot hold NUL). */
export const boundedText = (field: string, value: unknown, maxBytes: number) =>
  typeof value === "string" && value.length > 0 && Buffer.byteLength(value, "utf8") <= maxBytes &&
    !value.includes("\u0000")
    ? Effect.void
    : Effect.fail(new DurableConfigError({ field, rule: `a non-empty string of at most ${maxBytes} bytes without NUL` }))

export const boundedCount = (field: string, value: unknown, max: number) =>
  Number.isInteger(value) && (value as number) >= 1 && (value as number) <= max
    ? Effect.void
    : Effect.fail(new DurableConfigError({ field, rule: `an integer from 1 to ${max}` }))

export const finiteDuration = (field: string, value: Duration.DurationInput, allowZero: boolean) => {
  // Duration turns a negative number into zero; a negative input is a mistake, not "now".
  const negative = (typeof value === "number" || typeof value === "bigint") && value < 0
  const decoded = Duration.decodeUnknown(value)
  return !negative && decoded._tag === "Some" && Duration.isFinite(decoded.value) &&
      (allowZero
        ? Duration.greaterThanOrEqualTo(decoded.value, Duration.zero)
        : Duration.greaterThan(decoded.value, Duration.zero))
    ? Effect.void
    : Effect.fail(
      new DurableConfigError({
        field,
        rule: allowZero ? "a finite duration, zero or more" : "a finite duration greater than zero"
      })
    )
}

export const seconds = (input: Duration.DurationInput) => Duration.toMillis(Duration.decode(input)) / 1000
