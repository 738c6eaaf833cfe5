import { describe, expect, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as FastCheck from "fast-check"
import { createHmac } from "node:crypto"
import * as Cursor from "../src/Cursor.js"
import type { DurableConfigError } from "../src/Errors.js"
import * as Fingerprint from "../src/Fingerprint.js"

const key = (id: string, secret = `${id}-secret-of-32-bytes-or-so!!`): Cursor.CursorKey => ({
  id,
  secret: Redacted.make(secret)
})
const codec = (...keys: Cursor.Keyring) => Effect.runSync(Cursor.make(keys))
const configError = (...keys: Cursor.Keyring): DurableConfigError => Effect.runSync(Effect.flip(Cursor.make(keys)))

const filters = Fingerprint.fingerprintOfCanonical(`{"status":"open"}`)
const otherFilters = Fingerprint.fingerprintOfCanonical(`{"status":"closed"}`)
const high: Cursor.Position = { value: "2026-11-29T15:24:18.123456Z", tieBreaker: "1042" }
const first = Cursor.firstPage("tenant-7", filters, high)
const second = Cursor.nextPage(first, { value: "2026-11-29T15:20:01.000001Z", tieBreaker: "1001" })

const current = codec(key("k2"), key("k1"))
const encode = (cursor: Cursor.Cursor, with_ = current) => Effect.runSync(with_.encode(cursor))
const decodeResult = (token: string, with_ = current) => Effect.runSync(Effect.result(with_.decode(token)))
const invalidReason = (token: string, with_ = current): string => {
  const result = decodeResult(token, with_)
  if (Result.isSuccess(result)) throw new Error(`expected ${token} to be refused`)
  expect(result.failure._tag).toBe("InvalidCursor")
  return result.failure.reason
}

describe("Cursor codec", () => {
  it("round-trips a first-page and a next-page cursor", () => {
    expect(decodeResult(encode(first))).toEqual(Result.succeed(first))
    expect(decodeResult(encode(second))).toEqual(Result.succeed(second))
    expect(encode(first)).toMatch(/^[A-Za-z0-9_-]+$/)
  })

  it("round-trips any subject and positions", () => {
    FastCheck.assert(
      FastCheck.property(
        FastCheck.string({ minLength: 1, maxLength: 256, unit: "grapheme" }),
        FastCheck.string({ minLength: 1, maxLength: 64 }),
        FastCheck.bigInt({ min: 1n }),
        (subject, value, id) => {
          FastCheck.pre(Buffer.byteLength(subject, "utf8") <= Cursor.MAX_SUBJECT_BYTES)
          const cursor = Cursor.nextPage(
            Cursor.firstPage(subject, filters, { value, tieBreaker: String(id) }),
            { value, tieBreaker: String(id - 1n) }
          )
          expect(decodeResult(encode(cursor))).toEqual(Result.succeed(cursor))
        }
      )
    )
  })

  it("signs with the newest key and verifies with every listed key (rotation)", () => {
    const before = codec(key("k1"))
    const oldToken = encode(first, before)
    // After rotation k2 signs; pages handed out under k1 keep working.
    expect(decodeResult(oldToken, current)).toEqual(Result.succeed(first))
    const newToken = encode(first, current)
    expect(Buffer.from(newToken, "base64url").subarray(2, 4).toString()).toBe("k2")
    // Once k1 is retired, its tokens are refused.
    expect(invalidReason(oldToken, codec(key("k2")))).toBe("signed by an unknown key")
    expect(invalidReason(newToken, before)).toBe("signed by an unknown key")
  })

  it("refuses a token signed by a foreign secret under a known key id", () => {
    const foreign = codec(key("k2", "another secret of enough bytes"))
    expect(invalidReason(encode(first, foreign))).toBe("signature mismatch")
  })

  it("refuses tampered, truncated, extended and re-padded tokens", () => {
    const token = encode(second)
    const flipped = (i: number) => {
      const bytes = Buffer.from(token, "base64url")
      bytes[i] = bytes[i]! ^ 0x01
      return bytes.toString("base64url")
    }
    expect(invalidReason(flipped(0))).toMatch(/not a token of this kind or version/)
    expect(invalidReason(flipped(3))).toBe("signed by an unknown key")
    expect(invalidReason(flipped(10))).toBe("signature mismatch")
    expect(invalidReason(flipped(Buffer.from(token, "base64url").length - 1))).toBe("signature mismatch")
    expect(invalidReason(token.slice(0, -1))).toMatch(/signature mismatch|canonical/)
    expect(invalidReason(token.slice(0, 20))).toMatch(/truncated|signature mismatch|canonical/)
    expect(invalidReason(token + "A")).toMatch(/signature mismatch|canonical/)
    expect(invalidReason(token + "=")).toBe("not base64url without padding")
    expect(invalidReason(token.replace(/-/g, "+").replace(/_/g, "/") + "+")).toBe("not base64url without padding")
    expect(invalidReason("")).toBe("empty")
    expect(invalidReason("A".repeat(Cursor.MAX_TOKEN_LENGTH + 1))).toMatch(/longer than/)
  })

  it("accepts only the canonical base64url form of the same bytes", () => {
    // Find a token whose last character carries unused bits, then set one of them.
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    const token = encode(second)
    const unusedBits = [0, 4, 2][Buffer.from(token, "base64url").length % 3]!
    if (unusedBits === 0) {
      // No unused bits at this length: an extra byte in the subject shifts the length.
      const longer = encode({ ...second, subject: second.subject + "x" })
      return expect(invalidReason(longer.slice(0, -1) + alphabet[alphabet.indexOf(longer.at(-1)!) | 1])).toBe(
        "not the canonical base64url encoding"
      )
    }
    const last = alphabet.indexOf(token.at(-1)!)
    const twin = token.slice(0, -1) + alphabet[last | 1]
    expect(Buffer.from(twin, "base64url").equals(Buffer.from(token, "base64url"))).toBe(true)
    expect(invalidReason(twin)).toBe("not the canonical base64url encoding")
  })

  it("any byte-level mutation of a valid token decodes to a typed failure and never throws", () => {
    FastCheck.assert(
      FastCheck.property(
        FastCheck.nat(),
        FastCheck.oneof(
          FastCheck.record({ kind: FastCheck.constant("set" as const), byte: FastCheck.integer({ min: 0, max: 255 }) }),
          FastCheck.record({
            kind: FastCheck.constant("insert" as const),
            byte: FastCheck.integer({ min: 0, max: 255 })
          }),
          FastCheck.record({ kind: FastCheck.constant("delete" as const) })
        ),
        (at, mutation) => {
          const token = Buffer.from(encode(second), "latin1")
          const i = at % token.length
          const mutated = mutation.kind === "set"
            ? Buffer.concat([token.subarray(0, i), Buffer.from([mutation.byte]), token.subarray(i + 1)])
            : mutation.kind === "insert"
            ? Buffer.concat([token.subarray(0, i), Buffer.from([mutation.byte]), token.subarray(i)])
            : Buffer.concat([token.subarray(0, i), token.subarray(i + 1)])
          FastCheck.pre(!mutated.equals(token))
          const result = decodeResult(mutated.toString("latin1"))
          expect(Result.isFailure(result) && result.failure._tag === "InvalidCursor").toBe(true)
        }
      ),
      { numRuns: 2000 }
    )
  })
})

// Version 1's wire format written by hand, without encode's checks: what decode alone decides.
const signedByHand = (cursor: Cursor.Cursor, signer = key("k2")): string => {
  // JSON.stringify escapes strings as RFC 8785 does; the keys are written in canonical order.
  const payload = JSON.stringify({
    ...(cursor.after === undefined ? {} : { a: [cursor.after.value, cursor.after.tieBreaker] }),
    f: cursor.filter,
    h: [cursor.highWater.value, cursor.highWater.tieBreaker],
    s: cursor.subject
  })
  const kid = Buffer.from(signer.id, "ascii")
  const signed = Buffer.concat([Buffer.from([1, kid.length]), kid, Buffer.from(payload, "utf8")])
  const mac = createHmac("sha256", Redacted.value(signer.secret)).update(signed).digest()
  return Buffer.concat([signed, mac]).toString("base64url")
}

// Text around every limit: empty, NUL, lone surrogates, multibyte, and legal text that JSON
// writes six bytes a character, which takes a cursor of legal parts past the token length.
// (`size: "max"`: fast-check otherwise keeps strings short, far from the limits.)
const edgeText = FastCheck.oneof(
  FastCheck.string({ maxLength: 300, size: "max" }),
  FastCheck.string({ maxLength: 100, size: "max", unit: "grapheme" }),
  FastCheck.string({
    maxLength: 300,
    size: "max",
    unit: FastCheck.constantFrom("a", "é", "€", "😀", "\u0000", "\u0001", "\"", "\\", "\ud800", "\udc00")
  }),
  FastCheck.string({ minLength: 1, maxLength: 256, size: "max", unit: FastCheck.constantFrom("a", "\u0001", "\u001f") })
)

describe("Cursor limits", () => {
  it("encode issues exactly the tokens decode accepts, byte for byte", () => {
    FastCheck.assert(
      FastCheck.property(
        edgeText,
        edgeText,
        edgeText,
        FastCheck.option(FastCheck.tuple(edgeText, edgeText), { nil: undefined }),
        (subject, value, tieBreaker, after) => {
          const cursor: Cursor.Cursor = {
            ...Cursor.firstPage(subject, filters, { value, tieBreaker }),
            ...(after === undefined ? {} : { after: { value: after[0], tieBreaker: after[1] } })
          }
          const issued = Effect.runSync(Effect.result(current.encode(cursor)))
          const accepted = decodeResult(signedByHand(cursor))
          expect(Result.isSuccess(issued)).toBe(Result.isSuccess(accepted))
          if (Result.isSuccess(issued)) {
            expect(issued.success).toBe(signedByHand(cursor))
            expect(accepted).toEqual(Result.succeed(cursor))
          } else {
            expect(issued.failure).toMatchObject({ _tag: "InvalidInput" })
          }
        }
      ),
      { numRuns: 1000 }
    )
  })

  it("a cursor whose positions stay within positionCapacity(subject) fits in a token, whichever key signs it; one byte more does not", () => {
    const signedByLongestKeyId = codec(key("k".repeat(32)))
    FastCheck.assert(
      FastCheck.property(
        edgeText,
        FastCheck.constantFrom("v", "é", "😀", "\u0001", "\""),
        FastCheck.double({ min: 0, max: 1, noNaN: true }),
        (subject, unit, split) => {
          const capacity = Cursor.positionCapacity(subject)
          const valid = Result.isSuccess(Schema.decodeUnknownResult(Cursor.Subject)(subject))
          expect(capacity > 0).toBe(valid)
          if (!valid) return
          // The unit as the payload writes it, without its quotes.
          const width = Buffer.byteLength(JSON.stringify(unit), "utf8") - 2
          expect(width).toBeLessThanOrEqual(Cursor.MAX_BYTES_PER_CHARACTER)
          const units = Math.floor(capacity / width)
          const at = Math.floor(units * split)
          const position = { value: unit.repeat(at), tieBreaker: unit.repeat(units - at) }
          const longest = Cursor.nextPage(Cursor.firstPage(subject, filters, position), position)
          const token = encode(longest, signedByLongestKeyId)
          expect(token.length).toBeLessThanOrEqual(Cursor.MAX_TOKEN_LENGTH)
          expect(decodeResult(token, signedByLongestKeyId)).toEqual(Result.succeed(longest))
          // Tight: ASCII positions of one byte more each no longer fit.
          const over = { value: "v".repeat(capacity + 1 - at), tieBreaker: "t".repeat(at) }
          const refused = Effect.runSync(
            Effect.flip(signedByLongestKeyId.encode(Cursor.nextPage(Cursor.firstPage(subject, filters, over), over)))
          )
          expect(refused).toMatchObject({ _tag: "InvalidInput", argument: "cursor" })
        }
      ),
      { numRuns: 300 }
    )
  })

  it("encode refuses an empty, over-long or NUL subject, an over-long position and an over-long token", () => {
    const refused = (cursor: Cursor.Cursor) => Effect.runSync(Effect.flip(current.encode(cursor)))
    expect(refused({ ...first, subject: "" })).toMatchObject({ _tag: "InvalidInput", argument: "cursor.s" })
    expect(refused({ ...first, subject: "é".repeat(129) })).toMatchObject({ argument: "cursor.s" })
    expect(refused({ ...first, subject: "a\u0000b" })).toMatchObject({ argument: "cursor.s" })
    expect(refused({ ...first, subject: "a\ud800" })).toMatchObject({ argument: "cursor.s" })
    expect(refused({ ...second, after: { value: "1", tieBreaker: "9".repeat(Cursor.MAX_TOKEN_LENGTH + 1) } }))
      .toMatchObject({
        argument: "cursor.a[1]"
      })
    // Each part within its limit, but JSON writes every control character six bytes wide.
    const escaped = "\u0001".repeat(Cursor.MAX_SUBJECT_BYTES)
    const wide = "\u0001".repeat(Cursor.MAX_TOKEN_LENGTH / 16)
    const tooLong = refused(Cursor.nextPage(Cursor.firstPage(escaped, filters, { value: wide, tieBreaker: "1" }), {
      value: wide,
      tieBreaker: "1"
    }))
    expect(tooLong).toMatchObject({ _tag: "InvalidInput", argument: "cursor" })
    expect(tooLong.rule).toContain(`at most ${Cursor.MAX_TOKEN_LENGTH} characters`)
  })
})

describe("Cursor binding", () => {
  it.effect("binds a cursor to the subject and filters it was issued for", () =>
    Effect.gen(function*() {
      const token = encode(second)
      expect(yield* current.bind(token, "tenant-7", filters)).toEqual(second)
      const wrongSubject = yield* Effect.flip(current.bind(token, "tenant-8", filters))
      expect(wrongSubject).toMatchObject({ _tag: "CursorBindingMismatch", field: "subject" })
      const wrongFilters = yield* Effect.flip(current.bind(token, "tenant-7", otherFilters))
      expect(wrongFilters).toMatchObject({ _tag: "CursorBindingMismatch", field: "filter" })
    }))
})

describe("Cursor keyring", () => {
  it("refuses a secret shorter than 16 bytes, naming the key", () => {
    const error = configError(key("k2"), key("k1", "fifteen bytes!!"))
    expect(error).toMatchObject({ _tag: "DurableConfigError", field: "cursor.keys[1].secret" })
    expect(error.rule).toMatch(/16 bytes/)
    // Sixteen bytes in UTF-8 is enough, however few characters.
    expect(() => codec(key("k1", "éééééééé"))).not.toThrow()
  })

  it("refuses a malformed or repeated key id", () => {
    expect(configError(key("has space"))).toMatchObject({ field: "cursor.keys[0].id" })
    expect(configError(key("x".repeat(33)))).toMatchObject({ field: "cursor.keys[0].id" })
    expect(configError(key("k1"), key("k1"))).toMatchObject({ field: "cursor.keys[1].id" })
  })

  it("never shows a secret in the configuration error", () => {
    const error = configError(key("k1", "short-secret"))
    expect(JSON.stringify(error)).not.toContain("short-secret")
    expect(String(error)).not.toContain("short-secret")
  })
})

describe("Cursor keyring from configuration", () => {
  const fromEnv = (value: string) =>
    Effect.runSync(
      Effect.result(Cursor.keyringConfig).pipe(
        Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord({ ["CURSOR_KEYS"]: value }))
      )
    )

  it("reads id=secret pairs, newest first", () => {
    const keys = Result.getOrThrow(fromEnv("k2=second-secret-16b+,k1=first-secret-16b+!"))
    expect(keys.map((k) => k.id)).toEqual(["k2", "k1"])
    expect(Redacted.value(keys[1]!.secret)).toBe("first-secret-16b+!")
  })

  it("refuses an entry without an id", () => {
    expect(Result.isFailure(fromEnv("just-a-secret-without-id"))).toBe(true)
  })
})
