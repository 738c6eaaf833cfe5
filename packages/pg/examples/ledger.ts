// README "Mutation ledger": charging a card happens once per idempotency key, however often
// the client retries. Run it against any PostgreSQL:
//   DATABASE_URL=postgres://... node --conditions=source --import tsx packages/pg/examples/ledger.ts
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as Durable from "@effect-durable/pg/Durable"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Predicate from "effect/Predicate"
import * as SqlClient from "effect/sql/SqlClient"

interface Charge {
  readonly card: string
  readonly cents: number
}

export const chargeCard = (tenant: string, idempotencyKey: string, charge: Charge) =>
  Effect.gen(function*() {
    const ledger = yield* MutationLedger.MutationLedger
    const sql = yield* SqlClient.SqlClient
    return yield* ledger.execute(
      { subject: tenant, operation: "charge-card", key: idempotencyKey },
      { kind: "charge", eligibility: new Uint8Array(), fingerprint: yield* Fingerprint.fingerprint(charge) },
      // Runs once, in the ledger's transaction: the charge row and the record commit together.
      Effect.gen(function*() {
        if (charge.cents <= 0) return MutationLedger.reject({ error: "amount must be positive" })
        const rows = yield* sql<{ id: number }>`
          INSERT INTO charges (tenant, card, cents) VALUES (${tenant}, ${charge.card}, ${charge.cents}) RETURNING id`
        return MutationLedger.accept({ chargeId: rows[0]!.id })
      })
    )
  })

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS charges (id serial PRIMARY KEY, tenant text, card text, cents int)`
  const first = yield* chargeCard("acme", "req-1", { card: "4242", cents: 500 })
  const retry = yield* chargeCard("acme", "req-1", { card: "4242", cents: 500 })
  const changed = yield* Effect.flip(chargeCard("acme", "req-1", { card: "4242", cents: 900 })).pipe(
    Effect.filterOrFail(Predicate.isTagged("MutationConflict"), () => new Error("expected a conflict")),
    Effect.orDie
  )
  yield* Console.log(first._tag, first.response) // First { chargeId: 1 }
  yield* Console.log(retry._tag, retry.response) // Replay { chargeId: 1 }
  yield* Console.log(changed.message) // mutation charge-card/req-1 conflicts with its record (fingerprint differ)
  return { first, retry, changed }
})

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(program.pipe(Effect.provide(Durable.layerConfig({ migrate: true }))))
}
