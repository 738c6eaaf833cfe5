/**
 * The request fingerprint: SHA-256 over the method, the target as sent (path and query,
 * byte for byte) and the body. A JSON body (`application/json`, `*+json`) counts by its
 * RFC 8785 canonical form, so key order, whitespace and number spelling do not matter,
 * whenever that form loses nothing: no duplicate member names, every number exactly the
 * double it denotes (`100` and `1e2` are one number; `9007199254740993` is not a double).
 * Any other body, and JSON that would lose something, counts by its raw bytes with its
 * Content-Type. An empty body is empty whatever its Content-Type.
 */
import { canonicalizeWithin, fingerprint, type RequestFingerprint } from "@effect-durable/core/Fingerprint"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import { createHash } from "node:crypto"

const sha256 = (data: Uint8Array | string) => createHash("sha256").update(data).digest("hex")

const isJsonMediaType = (mediaType: string) => mediaType === "application/json" || mediaType.endsWith("+json")

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y

/** A decimal number as sign, significant digits and exponent: `1e2`, `100` and `100.0` all give `1e2`. */
const decimal = (text: string): string => {
  const [, sign, whole, fraction = "", exponent = "0"] = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text)!
  const digits = `${whole}${fraction}`.replace(/^0+/, "")
  if (digits === "") return "0"
  const significant = digits.replace(/0+$/, "")
  return `${sign}${significant}e${Number(exponent) - fraction.length + digits.length - significant.length}`
}

/** The number token denotes exactly the double JavaScript reads from it. */
const exactNumber = (token: string): boolean => {
  const value = Number(token)
  return Number.isFinite(value) && decimal(token) === decimal(String(value))
}

/** The index after the string literal that starts at `start`. */
const stringEnd = (text: string, start: number): number => {
  for (let i = start + 1; i < text.length; i++) {
    if (text[i] === "\\") i++
    else if (text[i] === "\"") return i + 1
  }
  return text.length
}

/**
 * Whether JSON text (already known to parse) survives `JSON.parse` unchanged in meaning: no
 * object repeats a member name, and every number is exact.
 */
export const lossless = (text: string): boolean => {
  const scopes: Array<Set<string> | null> = [] // a Set of member names per object, null per array
  let expectName = false
  let i = 0
  while (i < text.length) {
    const char = text[i]!
    if (char === "\"") {
      const end = stringEnd(text, i)
      const scope = scopes[scopes.length - 1]
      if (expectName && scope instanceof Set) {
        const name = JSON.parse(text.slice(i, end)) as string
        if (scope.has(name)) return false
        scope.add(name)
        expectName = false
      }
      i = end
      continue
    }
    if (char === "-" || (char >= "0" && char <= "9")) {
      NUMBER.lastIndex = i
      const token = NUMBER.exec(text)![0]
      if (!exactNumber(token)) return false
      i += token.length
      continue
    }
    if (char === "{") {
      scopes.push(new Set())
      expectName = true
    } else if (char === "[") {
      scopes.push(null)
    } else if (char === "}" || char === "]") {
      scopes.pop()
    } else if (char === ",") {
      expectName = scopes[scopes.length - 1] instanceof Set
    }
    i++
  }
  return true
}

/** The canonical JSON of a body, when it is JSON and canonicalizing it loses nothing. */
const canonicalJson = (body: Uint8Array): string | undefined => {
  let text: string
  let value: unknown
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(body)
    value = JSON.parse(text)
  } catch {
    return undefined
  }
  if (!lossless(text)) return undefined
  return Result.getOrUndefined(canonicalizeWithin(value, Number.POSITIVE_INFINITY))
}

/** What a body contributes to the fingerprint. */
const bodyPart = (contentType: string, body: Uint8Array) => {
  if (body.byteLength === 0) return { kind: "empty" }
  // "text/plain; charset=UTF-8" and "text/plain;charset=utf-8" say the same.
  const normalized = contentType.toLowerCase().replace(/[ \t]+/g, "")
  const mediaType = normalized.split(";")[0]!
  if (isJsonMediaType(mediaType)) {
    const canonical = canonicalJson(body)
    if (canonical !== undefined) return { kind: "json", mediaType, sha256: sha256(canonical) }
  }
  return { kind: "bytes", contentType: normalized, sha256: sha256(body) }
}

/** The fingerprint of a request: method, target (`originalUrl`: path and query as sent) and body. */
export const of = (
  method: string,
  target: string,
  contentType: string | undefined,
  body: Uint8Array
): Effect.Effect<RequestFingerprint> =>
  // Every part is a short string: canonical JSON cannot refuse it.
  Effect.orDie(fingerprint({ method, target, body: bodyPart(contentType ?? "", body) }))
