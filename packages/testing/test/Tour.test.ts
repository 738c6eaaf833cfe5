// The README's tour, last step: a test of a command that is safe to retry, on a real PostgreSQL
// (a fresh, migrated database of its own). Run it: npx vitest run packages/testing/test/Tour.test.ts
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// The command under test: the user row, the ledger record and the message commit together.
const signUp = (email: string, idempotencyKey: string) =>
  Effect.gen(function*() {
    const ledger = yield* MutationLedger.MutationLedger
    const outbox = yield* Outbox.Outbox
    const sql = yield* SqlClient.SqlClient
    return yield* ledger.execute(
      { subject: "tour", operation: "sign-up", key: idempotencyKey },
      { kind: "user", eligibility: new Uint8Array(), fingerprint: yield* Fingerprint.fingerprint({ email }) },
      Effect.gen(function*() {
        yield* sql`INSERT INTO users (email) VALUES (${email})`
        yield* outbox.enqueue("user-signed-up", { email })
        return MutationLedger.accept({ email })
      })
    )
  })

it.layer(TestSubstrate.layer())((it) => {
  it.effect("a retried sign-up writes one user and one message", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const worker = yield* OutboxWorker.OutboxWorker
      yield* sql`CREATE TABLE users (email text PRIMARY KEY)`

      const first = yield* signUp("ada@example.com", "req-1")
      const retry = yield* signUp("ada@example.com", "req-1") // the client retried: replayed
      expect([first._tag, retry._tag]).toEqual(["First", "Replay"])

      const claimed = yield* worker.claim({
        worker: "test",
        topics: ["user-signed-up"],
        limit: 10,
        lease: "30 seconds"
      })
      expect(claimed.map((message) => message.payload)).toEqual([{ email: "ada@example.com" }])
    }))
})
