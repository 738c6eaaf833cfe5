import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as FastCheck from "fast-check"
import * as Fingerprint from "../src/Fingerprint.js"
import { canonicalizeResult, canonicalizeWithin, MAX_DEPTH } from "../src/Fingerprint.js"

const canonical = (value: unknown): string => Result.getOrThrow(Fingerprint.canonicalizeResult(value))
const refusal = (value: unknown) => Result.flip(Fingerprint.canonicalizeResult(value)).pipe(Result.getOrThrow)

const fromBits = (hex: string): number => Buffer.from(hex, "hex").readDoubleBE(0)

describe("RFC 8785 canonical JSON", () => {
  it("reproduces the RFC's §3.2.2 example", () => {
    // Numbers as the RFC writes them in its input: parsed by JSON, then canonicalized.
    const input = JSON.parse(
      `{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\"\\/",
        "literals": [null, true, false]}`
    )
    expect(canonical(input)).toBe(
      `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\\u000f\\nA'B\\"\\\\\\\\\\"/"}`
    )
  })

  it("sorts keys by UTF-16 code units as the RFC's §3.2.3 example does", () => {
    const input = {
      "\u20ac": "Euro Sign",
      "\r": "Carriage Return",
      "\ufb33": "Hebrew Letter Dalet With Dagesh",
      "1": "One",
      "\ud83d\ude00": "Emoji: Grinning Face",
      "\u0080": "Control",
      "\u00f6": "Latin Small Letter O With Diaeresis"
    }
    expect(canonical(input)).toBe(
      `{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",` +
        `"\u20ac":"Euro Sign","\ud83d\ude00":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}`
    )
  })

  // RFC 8785 Appendix B: IEEE-754 bit patterns and their serializations.
  const appendixB: ReadonlyArray<readonly [string, string]> = [
    ["0000000000000000", "0"],
    ["8000000000000000", "0"],
    ["0000000000000001", "5e-324"],
    ["8000000000000001", "-5e-324"],
    ["7fefffffffffffff", "1.7976931348623157e+308"],
    ["ffefffffffffffff", "-1.7976931348623157e+308"],
    ["4340000000000000", "9007199254740992"],
    ["c340000000000000", "-9007199254740992"],
    ["4430000000000000", "295147905179352830000"],
    ["44b52d02c7e14af5", "9.999999999999997e+22"],
    ["44b52d02c7e14af6", "1e+23"],
    ["44b52d02c7e14af7", "1.0000000000000001e+23"],
    ["444b1ae4d6e2ef4e", "999999999999999700000"],
    ["444b1ae4d6e2ef4f", "999999999999999900000"],
    ["444b1ae4d6e2ef50", "1e+21"],
    ["3eb0c6f7a0b5ed8c", "9.999999999999997e-7"],
    ["3eb0c6f7a0b5ed8d", "0.000001"],
    ["41b3de4355555553", "333333333.3333332"],
    ["41b3de4355555554", "333333333.33333325"],
    ["41b3de4355555555", "333333333.3333333"],
    ["41b3de4355555556", "333333333.3333334"],
    ["41b3de4355555557", "333333333.33333343"],
    ["becbf647612f3696", "-0.0000033333333333333333"],
    ["43143ff3c1cb0959", "1424953923781206.2"]
  ]
  it.each(appendixB)("serializes the number with bits %s as %s", (bits, text) => {
    expect(canonical(fromBits(bits))).toBe(text)
  })

  it.each([
    ["7fffffffffffffff", "NaN"],
    ["7ff0000000000000", "Infinity"],
    ["fff0000000000000", "-Infinity"]
  ])("refuses the number with bits %s (%s)", (bits) => {
    expect(refusal(fromBits(bits)).reason).toMatch(/not a finite number/)
  })

  it("writes our own vectors in the ECMAScript number form", () => {
    expect(canonical([1e21, -0, 1.5e-7, 100, 0.1, 1e-7, 123456789012345680000])).toBe(
      "[1e+21,0,1.5e-7,100,0.1,1e-7,123456789012345680000]"
    )
    expect(canonical({ b: [], a: {}, c: "" })).toBe(`{"a":{},"b":[],"c":""}`)
    expect(canonical("\u0001\u001f\u007f\u2028")).toBe(`"\\u0001\\u001f\u007f\u2028"`)
    expect(canonical(Object.assign(Object.create(null), { z: 1, y: null }))).toBe(`{"y":null,"z":1}`)
  })

  it("refuses what JSON cannot carry, naming the JSON path", () => {
    class Money {
      constructor(readonly cents: number) {}
    }
    const cycle: Record<string, unknown> = {}
    cycle.self = { again: cycle }
    const cases: ReadonlyArray<readonly [unknown, string, RegExp]> = [
      [{ a: undefined }, "$.a", /undefined/],
      [{ a: [1, () => 1] }, "$.a[1]", /function/],
      [{ "odd key": Symbol("s") }, `$["odd key"]`, /symbol/],
      [{ n: 10n }, "$.n", /BigInt/],
      [{ x: [NaN] }, "$.x[0]", /finite/],
      [{ s: "ok\ud800" }, "$.s", /lone surrogate/],
      [{ s: "\udc00ok" }, "$.s", /lone surrogate/],
      // The path escapes the surrogate so that it prints.
      [{ ["k\ud800"]: 1 }, `$["k\\ud800"]`, /lone surrogate/],
      [{ at: new Date(0) }, "$.at", /Date/],
      [{ m: new Map() }, "$.m", /Map/],
      [{ price: new Money(5) }, "$.price", /Money/],
      // eslint-disable-next-line no-sparse-arrays
      [[1, , 3], "$[1]", /sparse/],
      [cycle, "$.self.again", /circular/],
      [{ [Symbol("k")]: 1 }, "$", /symbol keys/],
      [undefined, "$", /undefined/],
      // PostgreSQL cannot store U+0000 in jsonb or text: refused before any SQL.
      [{ note: ["ok", "a\u0000b"] }, "$.note[1]", /NUL/],
      [{ ["k\u0000"]: 1 }, `$["k\\u0000"]`, /NUL/]
    ]
    for (const [value, path, reason] of cases) {
      const error = refusal(value)
      expect(error._tag).toBe("UnsupportedJsonValue")
      expect(error.path).toBe(path)
      expect(error.reason).toMatch(reason)
    }
  })

  it("refuses nesting deeper than MAX_DEPTH without overflowing the stack", () => {
    let deep: unknown = "bottom"
    for (let i = 0; i < 20_000; i++) deep = [deep]
    const error = refusal(deep)
    expect(error.reason).toBe(`nested deeper than ${MAX_DEPTH} levels`)
    expect(error.path).toBe("$" + "[0]".repeat(MAX_DEPTH))
    let ok: unknown = 1
    for (let i = 0; i < MAX_DEPTH; i++) ok = { a: ok }
    expect(Result.isSuccess(canonicalizeResult(ok))).toBe(true)
  })

  it("stops as soon as a bounded text is known to be too long", () => {
    const huge = Array.from({ length: 3_000_000 }, (_, i) => i)
    const result = canonicalizeWithin(huge, 1024)
    expect(Result.isFailure(result) && result.failure).toMatchObject({ _tag: "PayloadTooLarge", limit: 1024 })
    // It stopped just past the limit, not at the end of 20 MB of text.
    expect(Result.isFailure(result) && result.failure._tag === "PayloadTooLarge" && result.failure.bytes).toBeLessThan(
      1100
    )
    expect(canonicalizeWithin({ a: "é".repeat(600) }, 1024)._tag).toBe("Failure")
    expect(canonicalizeWithin({ a: "é".repeat(400) }, 1024)._tag).toBe("Success")
  })

  it("allows a shared (non-circular) reference", () => {
    const shared = { x: 1 }
    expect(canonical({ a: shared, b: shared })).toBe(`{"a":{"x":1},"b":{"x":1}}`)
  })
})

// JSON equality: what JSON.parse(JSON.stringify(...)) cannot tell apart (-0 and 0 are one number).
const jsonEquals = (a: unknown, b: unknown): boolean => {
  if (typeof a !== "object" || a === null || typeof b !== "object" || b === null) return a === b
  if (Array.isArray(a) !== Array.isArray(b)) return false
  const ka = Object.keys(a), kb = Object.keys(b)
  return ka.length === kb.length &&
    ka.every((k) => Object.hasOwn(b, k) && jsonEquals((a as any)[k], (b as any)[k]))
}

const reorderKeys = (value: unknown, random: () => number): unknown => {
  if (Array.isArray(value)) return value.map((v) => reorderKeys(v, random))
  if (typeof value !== "object" || value === null) return value
  const entries = Object.entries(value).sort(() => random() - 0.5)
  return Object.fromEntries(entries.map(([k, v]) => [k, reorderKeys(v, random)]))
}

// JSON values PostgreSQL can store: no U+0000 in any string or key.
const json = FastCheck.jsonValue({ maxDepth: 4 }).filter((value) => !JSON.stringify(value).includes("\\u0000"))

describe("canonical JSON properties", () => {
  it("the fingerprint does not depend on key order", () => {
    FastCheck.assert(FastCheck.property(json, FastCheck.integer(), (value, seed) => {
      let state = seed
      const random = () => ((state = (state * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff)
      const a = Fingerprint.fingerprintOfCanonical(canonical(value))
      const b = Fingerprint.fingerprintOfCanonical(canonical(reorderKeys(value, random)))
      expect(Fingerprint.equals(a, b)).toBe(true)
    }))
  })

  it("different values have different canonical text", () => {
    FastCheck.assert(FastCheck.property(json, json, (a, b) => {
      expect(canonical(a) === canonical(b)).toBe(jsonEquals(a, b))
    }))
  })

  it("canonical text parses back to an equal value and is a fixed point", () => {
    FastCheck.assert(FastCheck.property(json, (value) => {
      const text = canonical(value)
      expect(jsonEquals(JSON.parse(text), value)).toBe(true)
      expect(canonical(JSON.parse(text))).toBe(text)
    }))
  })
})

describe("fingerprint", () => {
  it.effect("is the SHA-256 of the canonical text (32 bytes)", () =>
    Effect.gen(function*() {
      const empty = yield* Fingerprint.fingerprint({})
      expect(empty.length).toBe(32)
      // sha256sum of the two bytes `{}`.
      expect(Fingerprint.toHex(empty)).toBe("44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")
      const reordered = yield* Fingerprint.fingerprint(JSON.parse(`{ "a" : 1 }`))
      expect(Fingerprint.toHex(reordered)).toBe("015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862")
    }))

  it.effect("fails in the error channel for a value JSON cannot carry", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Fingerprint.fingerprint({ when: new Date() }))
      expect(error._tag).toBe("UnsupportedJsonValue")
      expect(error.path).toBe("$.when")
    }))

  it("checks the length of a stored fingerprint", () => {
    expect(Fingerprint.RequestFingerprint.is(new Uint8Array(32))).toBe(true)
    expect(Fingerprint.RequestFingerprint.is(new Uint8Array(31))).toBe(false)
  })
})
