// README "Request fingerprints": key order, whitespace and number spelling do not change a
// fingerprint; a value JSON cannot carry is refused, naming where it is.
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as Effect from "effect/Effect"

export const program = Effect.gen(function*() {
  const a = yield* Fingerprint.fingerprint({ amount: 100, currency: "EUR" })
  const b = yield* Fingerprint.fingerprint(JSON.parse(`{ "currency": "EUR", "amount": 1e2 }`))
  const same = Fingerprint.equals(a, b) // true
  // A Date is not JSON: UnsupportedJsonValue { path: "$.at", reason: "an instance of Date" }
  const refused = yield* Effect.flip(Fingerprint.fingerprint({ at: new Date() }))
  return { same, hex: Fingerprint.toHex(a), refused }
})
