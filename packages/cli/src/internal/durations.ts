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
