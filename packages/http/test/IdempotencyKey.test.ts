import { describe, expect, it } from "@effect/vitest"
import * as Result from "effect/Result"
import * as FastCheck from "fast-check"
import * as IdempotencyKey from "../src/IdempotencyKey.js"

const key = (value: string, bounds?: IdempotencyKey.Bounds) => Result.getOrThrow(IdempotencyKey.parse(value, bounds))
const reason = (value: string, bounds?: IdempotencyKey.Bounds) =>
  Result.getOrThrow(Result.flip(IdempotencyKey.parse(value, bounds))).reason

/** An sf-string of `text`: quoted, with `"` and `\` escaped. */
const quote = (text: string) => `"${text.replace(/[\\"]/g, (char) => `\\${char}`)}"`

describe("the Idempotency-Key field value", () => {
  it("is an sf-string: the key is the parsed value", () => {
    expect(key(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`)).toBe("8e03978e-40d5-43e8-bc93-6894a57f9324")
    expect(key(`"a\\"b"`)).toBe(`a"b`)
    expect(key(`"a\\\\b"`)).toBe(`a\\b`)
    expect(key(`"with space"`)).toBe("with space")
    expect(key(` "k" `)).toBe("k")
  })

  it("a bare word is accepted as the same key (Stripe's clients send it unquoted)", () => {
    expect(key("KG5LxwFBepaKHyUD")).toBe("KG5LxwFBepaKHyUD")
    expect(key("8e03978e-40d5")).toBe(key(`"8e03978e-40d5"`))
    expect(key("dGVzdA==")).toBe("dGVzdA==")
  })

  it("refuses what is not one key, saying why", () => {
    expect(reason("")).toBe("the key is empty")
    expect(reason(`""`)).toBe("the key is empty")
    expect(reason(`"  "`)).toBe("the key is blank")
    expect(reason(`"${"k".repeat(256)}"`)).toBe("a key has at most 255 characters")
    expect(reason(`"ké"`)).toBe("a key holds printable ASCII characters only")
    expect(reason("\"a\tb\"")).toBe("a key holds printable ASCII characters only")
    expect(reason(`"a\\b"`)).toBe("a backslash escapes only \" and \\")
    expect(reason(`"open`)).toBe("the quoted string is not closed")
    expect(reason(`"k";p=1`)).toBe("parameters are not defined for this field")
    expect(reason(`"a", "b"`)).toBe("one key expected: a list or a repeated field line is not a key")
    for (const bare of ["a b", "a,b", "k;p=1", "ké", "a\"b"]) expect(reason(bare)).toMatch(/^a key is a quoted string/)
  })

  it("keeps to the configured bounds", () => {
    expect(reason(`"abc"`, { minLength: 4, maxLength: 8 })).toBe("a key has at least 4 characters")
    expect(reason(`"abcdefghi"`, { minLength: 4, maxLength: 8 })).toBe("a key has at most 8 characters")
    expect(key(`"abcd"`, { minLength: 4, maxLength: 8 })).toBe("abcd")
  })

  const printable = FastCheck.string({
    unit: FastCheck.integer({ min: 0x20, max: 0x7e }).map((code) => String.fromCharCode(code)),
    minLength: 1,
    maxLength: 255
  })
    .filter((text) => text.trim().length > 0)

  it("every printable ASCII key survives quoting", () => {
    FastCheck.assert(FastCheck.property(printable, (text) => {
      expect(key(quote(text))).toBe(text)
    }))
  })

  it("a value with a character outside printable ASCII is refused", () => {
    FastCheck.assert(FastCheck.property(printable, FastCheck.integer({ min: 0x80, max: 0xff }), (text, code) => {
      expect(Result.isFailure(IdempotencyKey.parse(quote(`${text}${String.fromCharCode(code)}`)))).toBe(true)
    }))
  })
})
