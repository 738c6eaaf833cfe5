import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as CursorExample from "../examples/cursor.js"
import * as FingerprintExample from "../examples/fingerprint.js"

describe("the README examples of the core do what the README says", () => {
  it.effect("fingerprint: equal JSON fingerprints alike; a Date is refused at $.at", () =>
    Effect.gen(function*() {
      const { hex, refused, same } = yield* FingerprintExample.program
      expect(same).toBe(true)
      expect(hex).toMatch(/^[0-9a-f]{64}$/)
      expect(refused).toMatchObject({ _tag: "UnsupportedJsonValue", path: "$.at", reason: "an instance of Date" })
    }))

  it.effect("cursor: a token binds back to its subject and filters, and not to another subject", () =>
    Effect.gen(function*() {
      const { cursor, foreign, token } = yield* CursorExample.program
      expect(token).toMatch(/^[A-Za-z0-9_-]+$/)
      expect(cursor).toMatchObject({ subject: "tenant-7", after: { tieBreaker: "1001" } })
      expect(foreign).toMatchObject({ _tag: "CursorBindingMismatch", field: "subject" })
    }))
})
