// README "Signed keyset cursors": a cursor is signed with the newest key, verified with every
// listed one, and bound to the subject and filters it was issued for.
import * as Cursor from "@effect-durable/core/Cursor"
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"

export const program = Effect.gen(function*() {
  const codec = yield* Cursor.CursorCodec
  const filters = yield* Fingerprint.fingerprint({ status: "open" })
  const first = Cursor.firstPage("tenant-7", filters, { value: "2026-11-29T15:24:18.123456Z", tieBreaker: "1042" })
  const token = yield* codec.encode(
    Cursor.nextPage(first, { value: "2026-11-29T15:20:01.000000Z", tieBreaker: "1001" })
  )
  // Later, from the client: refused unless untouched, signed by a listed key,
  // and issued for this subject and these filters.
  const cursor = yield* codec.bind(token, "tenant-7", filters)
  const foreign = yield* Effect.flip(codec.bind(token, "tenant-8", filters)) // CursorBindingMismatch
  return { token, cursor, foreign }
}).pipe(
  Effect.provide(Cursor.layer([
    { id: "k2", secret: Redacted.make("a secret of at least sixteen bytes") },
    { id: "k1", secret: Redacted.make("the previous secret, still verifying") }
  ]))
)
