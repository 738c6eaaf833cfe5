/**
 * The `Idempotency-Key` field value, read as draft-ietf-httpapi-idempotency-key-header-07
 * defines it: a Structured Field Item whose value is a String (RFC 9651 §3.3.3), printable
 * ASCII with `\"` and `\\` as its only escapes. The key is the parsed value.
 *
 * Also accepted, as most clients send it: the bare form `Idempotency-Key: 8e03978e-40d5`
 * (a single token-like word), which is the same key as `"8e03978e-40d5"`. Refused: an empty
 * or blank key, a key outside the length bounds, non-ASCII or control characters, bad
 * escapes, parameters (`"k";a=1`), and lists or repeated field lines (which Node joins with
 * `, `).
 *
 * @since 0.1.0
 */
import * as Result from "effect/Result"

export interface Bounds {
  /** Fewest characters a key may have, at least 1. */
  readonly minLength: number
  /** Most characters a key may have, at most 255. */
  readonly maxLength: number
}

/** The bounds unless configured: 1 to 255 characters (Stripe's limit). */
export const defaultBounds: Bounds = { minLength: 1, maxLength: 255 }

/** Why a field value is not a key; shown to the client in a 400 problem (the value itself never is). */
export interface Refusal {
  readonly reason: string
}

// The bare form: the characters of an RFC 9651 token (tchar, ":" and "/"), plus "=" for
// base64 padding. No space, comma, semicolon, quote or backslash.
const BARE = /^[A-Za-z0-9!#$%&'*+\-.^_`|~:/=]+$/

const refuse = (reason: string): Result.Result<string, Refusal> => Result.fail({ reason })

/** The String of a quoted sf-string that starts the value, and what follows it. */
const quoted = (value: string): Result.Result<{ readonly key: string; readonly rest: string }, Refusal> => {
  let key = ""
  for (let i = 1; i < value.length; i++) {
    const char = value[i]!
    if (char === "\\") {
      const next = value[i + 1]
      if (next !== "\"" && next !== "\\") return Result.fail({ reason: "a backslash escapes only \" and \\" })
      key += next
      i++
    } else if (char === "\"") {
      return Result.succeed({ key, rest: value.slice(i + 1) })
    } else {
      const code = char.charCodeAt(0)
      if (code < 0x20 || code > 0x7e) return Result.fail({ reason: "a key holds printable ASCII characters only" })
      key += char
    }
  }
  return Result.fail({ reason: "the quoted string is not closed" })
}

/** The key a field value carries, or why it carries none. */
export const parse = (value: string, bounds: Bounds = defaultBounds): Result.Result<string, Refusal> => {
  const trimmed = value.replace(/^[ \t]+|[ \t]+$/g, "")
  let key: string
  if (trimmed.startsWith("\"")) {
    const read = quoted(trimmed)
    if (Result.isFailure(read)) return Result.fail(read.failure)
    if (read.success.rest.startsWith(";")) return refuse("parameters are not defined for this field")
    if (read.success.rest.length > 0) return refuse("one key expected: a list or a repeated field line is not a key")
    key = read.success.key
  } else if (trimmed.length === 0) {
    return refuse("the key is empty")
  } else if (BARE.test(trimmed)) {
    key = trimmed
  } else {
    return refuse(
      "a key is a quoted string (\"...\") of printable ASCII, or one word without spaces, commas or semicolons"
    )
  }
  if (key.length === 0) return refuse("the key is empty")
  if (key.trim().length === 0) return refuse("the key is blank")
  if (key.length > bounds.maxLength) return refuse(`a key has at most ${bounds.maxLength} characters`)
  if (key.length < bounds.minLength) return refuse(`a key has at least ${bounds.minLength} characters`)
  return Result.succeed(key)
}
