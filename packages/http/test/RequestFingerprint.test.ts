import * as Fingerprint from "@effect-durable/core/Fingerprint"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as FastCheck from "fast-check"
import { lossless, of } from "../src/internal/requestFingerprint.js"

const utf8 = (text: string) => new TextEncoder().encode(text)
const hex = (method: string, target: string, contentType: string | undefined, body: string) =>
  Effect.runSync(Effect.map(of(method, target, contentType, utf8(body)), Fingerprint.toHex))

describe("the request fingerprint", () => {
  it("covers the method and the target as sent, query included", () => {
    const base = hex("POST", "/a?x=1", "application/json", "{}")
    expect(hex("PATCH", "/a?x=1", "application/json", "{}")).not.toBe(base)
    expect(hex("POST", "/a?x=2", "application/json", "{}")).not.toBe(base)
    expect(hex("POST", "/a", "application/json", "{}")).not.toBe(base)
    expect(hex("POST", "/a?x=1", "application/json", "{}")).toBe(base)
  })

  it("JSON counts by its canonical form: member order, whitespace, number spelling, charset", () => {
    const base = hex("POST", "/", "application/json", `{"a":1,"b":[100,"x"]}`)
    expect(hex("POST", "/", "application/json", ` { "b" : [ 1e2 , "x" ] , "a" : 1.0 } `)).toBe(base)
    expect(hex("POST", "/", "application/json; charset=utf-8", `{"b":[100,"x"],"a":1}`)).toBe(base)
    expect(hex("POST", "/", "application/vnd.api+json", `{"a":1,"b":[100,"x"]}`)).not.toBe(base)
  })

  it("JSON that canonical form would change, invalid JSON and other types count by bytes and Content-Type", () => {
    expect(hex("POST", "/", "application/json", `{"a":1,"a":2}`)).not.toBe(
      hex("POST", "/", "application/json", `{"a":2}`)
    )
    expect(hex("POST", "/", "application/json", `{"n":9007199254740993}`)).not.toBe(
      hex("POST", "/", "application/json", `{"n":9007199254740992}`)
    )
    expect(hex("POST", "/", "application/json", `{"s":"\\u0000"}`)).not.toBe(
      hex("POST", "/", "application/json", `{"s": "\\u0000"}`)
    )
    expect(hex("POST", "/", "application/json", `{`)).not.toBe(hex("POST", "/", "application/json", `{ `))
    expect(hex("POST", "/", "text/plain", "a")).not.toBe(hex("POST", "/", "text/csv", "a"))
    expect(hex("POST", "/", "text/plain; charset=UTF-8", "a")).toBe(hex("POST", "/", "text/plain;charset=utf-8", "a"))
    expect(hex("POST", "/", "text/plain", "{}")).not.toBe(hex("POST", "/", "application/json", "{}"))
  })

  it("an empty body is empty whatever its Content-Type", () => {
    const none = hex("POST", "/", undefined, "")
    expect(hex("POST", "/", "application/json", "")).toBe(none)
    expect(hex("POST", "/", "text/plain", "")).toBe(none)
    expect(hex("POST", "/", "application/json", "{}")).not.toBe(none)
  })
})

describe("lossless JSON text", () => {
  it("finds repeated member names at any depth, not across objects", () => {
    expect(lossless(`{"a":1,"b":{"a":2}}`)).toBe(true)
    expect(lossless(`[{"a":1},{"a":1}]`)).toBe(true)
    expect(lossless(`{"a":{"x":1,"x":2}}`)).toBe(false)
    expect(lossless(`{"a\\u0062":1,"ab":2}`)).toBe(false)
    expect(lossless(`{"k":"a\\"b","a\\"b":1}`)).toBe(true)
  })

  it("finds numbers that are not exactly the double they parse to", () => {
    for (
      const exact of ["0", "-0", "1e2", "100.0", "0.1", "1.5e-7", "9007199254740992", "1e21", "123456789012345680000"]
    ) {
      expect(lossless(exact)).toBe(true)
    }
    for (const inexact of ["9007199254740993", "0.10000000000000001", "1e400", "1e-400", "12345678901234567890"]) {
      expect(lossless(inexact)).toBe(false)
    }
  })

  it("every JSON.stringify output is lossless", () => {
    FastCheck.assert(FastCheck.property(FastCheck.jsonValue({ maxDepth: 3 }), (value) => {
      expect(lossless(JSON.stringify(value))).toBe(true)
    }))
  })
})
