/**
 * RFC 8785 (JSON Canonicalization Scheme) and the SHA-256 request fingerprint built on it.
 * Two values that JSON sees as equal canonicalize to the same text whatever their key
 * order; anything JSON cannot carry faithfully is refused with the JSONPath that holds it.
 *
 * Integers beyond 2^53 have already lost precision as JavaScript numbers before they reach
 * this module: send them as strings.
 *
 * @since 0.1.0
 */
import * as Brand from "effect/Brand"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import { createHash, timingSafeEqual } from "node:crypto"
import { PayloadTooLarge, UnsupportedJsonValue } from "./Errors.js"
import { isWellFormed } from "./Input.js"

/** A SHA-256 digest of a value's canonical JSON: always 32 bytes. */
export type RequestFingerprint = Uint8Array & Brand.Brand<"@effect-durable/RequestFingerprint">

/** Checks the length of bytes read back from storage. */
export const RequestFingerprint = Brand.make<RequestFingerprint>(
  (bytes) => bytes.length === 32 || `a request fingerprint is 32 bytes, got ${bytes.length}`
)

/** Deepest nesting of arrays and objects accepted: deeper values are refused, never overflow the stack. */
export const MAX_DEPTH = 512

/**
 * The canonical JSON text of a value of at most `maxBytes` UTF-8 bytes. The walk stops as soon
 * as the text is known to be longer (a 10 MB value is not canonicalized in full to be refused);
 * the `PayloadTooLarge` then counts the bytes seen so far (`topic` is left empty for the caller).
 */
export const canonicalizeWithin = (
  value: unknown,
  maxBytes: number
): Result.Result<string, UnsupportedJsonValue | PayloadTooLarge> => {
  const walk: Walk = { size: 0, maxBytes, ancestors: new Set() }
  try {
    const text = canonical(value, "$", walk, 0)
    const bytes = Buffer.byteLength(text, "utf8")
    return bytes > maxBytes
      ? Result.fail(new PayloadTooLarge({ topic: "", bytes, limit: maxBytes }))
      : Result.succeed(text)
  } catch (error) {
    if (error instanceof Refusal) {
      return Result.fail(new UnsupportedJsonValue({ path: error.path, reason: error.reason }))
    }
    if (error instanceof TooLarge) {
      return Result.fail(new PayloadTooLarge({ topic: "", bytes: walk.size, limit: maxBytes }))
    }
    throw error
  }
}

/** The canonical JSON text of a value, or the reason it is not JSON. */
export const canonicalizeResult = (value: unknown): Result.Result<string, UnsupportedJsonValue> =>
  canonicalizeWithin(value, Infinity) as Result.Result<string, UnsupportedJsonValue>

/** The canonical JSON text (RFC 8785) of a value. */
export const canonicalize = (value: unknown): Effect.Effect<string, UnsupportedJsonValue> =>
  Effect.suspend(() => Effect.fromResult(canonicalizeResult(value)))

/** SHA-256 of the canonical JSON of a value. */
export const fingerprint = (value: unknown): Effect.Effect<RequestFingerprint, UnsupportedJsonValue> =>
  Effect.map(canonicalize(value), fingerprintOfCanonical)

/** SHA-256 of text that is already canonical JSON. */
export const fingerprintOfCanonical = (canonicalJson: string): RequestFingerprint =>
  new Uint8Array(createHash("sha256").update(canonicalJson, "utf8").digest()) as RequestFingerprint

/** Lowercase hex, the form fingerprints take in logs and cursors. */
export const toHex = (fingerprint: RequestFingerprint): string => Buffer.from(fingerprint).toString("hex")

/** Constant-time equality of two fingerprints. */
export const equals = (a: RequestFingerprint, b: RequestFingerprint): boolean =>
  a.length === b.length && timingSafeEqual(a, b)

// Internal: the walk throws these and the boundaries above turn them into typed errors.
class Refusal {
  constructor(readonly path: string, readonly reason: string) {}
}
class TooLarge {}

interface Walk {
  /** UTF-16 units written so far: a lower bound of the UTF-8 bytes. */
  size: number
  readonly maxBytes: number
  readonly ancestors: Set<object>
}

const grow = (walk: Walk, text: string): string => {
  walk.size += text.length
  if (walk.size > walk.maxBytes) throw new TooLarge()
  return text
}

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/

const childPath = (path: string, key: string): string =>
  IDENTIFIER.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`

// A lone surrogate cannot be encoded as UTF-8, so two different strings would hash alike.

const canonicalString = (text: string, path: string): string => {
  if (!isWellFormed(text)) throw new Refusal(path, "string holds a lone surrogate")
  // JSON can carry U+0000; PostgreSQL's jsonb and text cannot store it.
  if (text.includes("\u0000")) {
    throw new Refusal(path, "string holds a NUL character (U+0000), which PostgreSQL cannot store")
  }
  // JSON.stringify escapes exactly what RFC 8785 §3.2.2.2 requires: `"`, `\`, and the
  // control characters (the short forms \b \t \n \f \r, the rest as lowercase \u00xx).
  return JSON.stringify(text)
}

const describe = (value: object): string => {
  const name = Object.getPrototypeOf(value)?.constructor?.name
  return typeof name === "string" && name.length > 0 ? `an instance of ${name}` : "a non-plain object"
}

const canonical = (value: unknown, path: string, walk: Walk, depth: number): string => {
  switch (typeof value) {
    case "string":
      return grow(walk, canonicalString(value, path))
    case "number":
      if (!Number.isFinite(value)) throw new Refusal(path, `${value} is not a finite number`)
      // ECMAScript's Number-to-String is the form RFC 8785 §3.2.2.3 prescribes; it turns -0 into "0".
      return grow(walk, String(value))
    case "boolean":
      return grow(walk, value ? "true" : "false")
    case "undefined":
      throw new Refusal(path, "undefined")
    case "bigint":
      throw new Refusal(path, "a BigInt (send it as a string)")
    case "function":
      throw new Refusal(path, "a function")
    case "symbol":
      throw new Refusal(path, "a symbol")
  }
  if (value === null) return grow(walk, "null")
  const object = value as object
  if (walk.ancestors.has(object)) throw new Refusal(path, "a circular reference")
  if (depth >= MAX_DEPTH) throw new Refusal(path, `nested deeper than ${MAX_DEPTH} levels`)
  walk.ancestors.add(object)
  try {
    if (Array.isArray(object)) {
      const parts: Array<string> = []
      for (let i = 0; i < object.length; i++) {
        if (!(i in object)) throw new Refusal(`${path}[${i}]`, "a hole in a sparse array")
        parts.push(canonical(object[i], `${path}[${i}]`, walk, depth + 1))
        grow(walk, ",")
      }
      return `[${parts.join(",")}]`
    }
    const prototype = Object.getPrototypeOf(object)
    if (prototype !== Object.prototype && prototype !== null) throw new Refusal(path, describe(object))
    if (Object.getOwnPropertySymbols(object).length > 0) throw new Refusal(path, "an object with symbol keys")
    // Default sort compares UTF-16 code units, the order RFC 8785 §3.2.3 requires.
    const keys = Object.keys(object).sort()
    const parts: Array<string> = []
    for (const key of keys) {
      const member = childPath(path, key)
      const name = grow(walk, canonicalString(key, member))
      parts.push(`${name}:${canonical((object as Record<string, unknown>)[key], member, walk, depth + 1)}`)
      grow(walk, ":,")
    }
    return `{${parts.join(",")}}`
  } finally {
    walk.ancestors.delete(object)
  }
}
