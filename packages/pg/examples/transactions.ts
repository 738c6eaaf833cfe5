// README "Transactions": the substrate's own primitives for application code — bounded lock
// waits, and a transaction-scoped advisory lock on a key of your own.
import * as Transactions from "@effect-durable/pg/Transactions"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// One invoice run per customer at a time, however many instances run the job.
export const invoiceRun = (customer: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql.withTransaction(Effect.gen(function*() {
      const mine = yield* Transactions.advisoryLock("invoice-run", customer, { wait: false })
      if (!mine) return "another instance is on it" as const
      yield* sql`UPDATE accounts SET invoiced_at = now() WHERE customer = ${customer}`
        // A row lock held longer than 2 s by someone else fails retryable (55P03), not hangs.
        .pipe(Transactions.withTimeouts({ lockTimeout: "2 seconds" }))
      return "invoiced" as const
    }))
  })

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS accounts (customer text PRIMARY KEY, invoiced_at timestamptz)`
  yield* sql`INSERT INTO accounts (customer) VALUES ('acme') ON CONFLICT DO NOTHING`
  return yield* invoiceRun("acme") // "invoiced"
})
