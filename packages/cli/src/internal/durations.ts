/**
 * Durations as operators write them: `30m`, `12h`, `7d`, `2w`, or the library's own
 * `"2 days"`. Read once here for the command line and the admin page's filters.
 */
import type * as Duration from "effect/Duration"

const UNITS: Readonly<Record<string, string>> = {
  ms: "millis",
  s: "seconds",
  sec: "seconds",
  m: "minutes",
  min: "minutes",
  h: "hours",
  d: "days",
  w: "weeks"
}

/** `1 minute`, `2 minutes`: how the library reads it, and how it reads in a message. */
const spelled = (amount: string, unit: string): Duration.Input =>
  `${amount} ${
    Number(amount) === 1 ? unit.replace(/s$/, "") : unit.endsWith("s") ? unit : `${unit}s`
  }` as Duration.Input

/** `7d` -> `7 days`; `"2 days"` stays; anything else is `undefined`. */
export const parseDuration = (text: string): Duration.Input | undefined => {
  const short = /^(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|d|w)$/.exec(text.trim())
  if (short !== null) return spelled(short[1]!, UNITS[short[2]!]!)
  const long = /^(\d+(?:\.\d+)?)\s+(millis?|seconds?|minutes?|hours?|days?|weeks?)$/.exec(text.trim())
  return long === null ? undefined : spelled(long[1]!, long[2]!)
}

/**
 * A rate as operators write it: `10/1m`, `5/s` (one of the unit), `100/2 hours`. Only its
 * shape is read here; the library refuses what is out of range. `undefined`: not a rate.
 */
export const parseRate = (text: string): { readonly limit: number; readonly per: Duration.Input } | undefined => {
  const shape = /^\s*(\d+)\s*\/\s*(.+?)\s*$/.exec(text)
  if (shape === null) return undefined
  const period = shape[2]!
  const per = parseDuration(/^[a-z]+$/i.test(period) ? `1${period}` : period)
  return per === undefined ? undefined : { limit: Number(shape[1]), per }
}

const PERIOD_UNITS: ReadonlyArray<readonly [string, number]> = [["d", 86_400_000], ["h", 3_600_000], [
  "m",
  60_000
], ["s", 1000]]

/** A rate's period as `parseRate` reads it back: the largest unit that divides it (`90s`, `2h`, `250ms`). */
export const formatPeriod = (millis: number): string => {
  const unit = PERIOD_UNITS.find(([, size]) => millis % size === 0)
  return unit === undefined ? `${millis}ms` : `${millis / unit[1]}${unit[0]}`
}
