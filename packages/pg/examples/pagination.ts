// README "Pagination": page through an account's transfers, oldest first, with signed cursors.
import * as Keyset from "@effect-durable/pg/Keyset"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

export const listTransfers = (account: string, cursor?: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const keyset = yield* Keyset.Keyset
    return yield* keyset.page<{ id: string; amount: number }>({
      table: "transfers",
      subject: account, // the cursor only works for this account...
      order: { column: "booked_at", tieBreaker: "id", direction: "asc" }, // ...in this order...
      where: { currency: "EUR" }, // ...with these filters
      filter: sql`sender = ${account} OR receiver = ${account}`,
      limit: 2,
      ...(cursor === undefined ? {} : { cursor })
    })
  })
// pages of amounts, oldest first: [10, 20] -> [50, 60], then nextCursor is undefined

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS transfers (
    id bigserial PRIMARY KEY, sender text NOT NULL, receiver text NOT NULL, currency text NOT NULL,
    amount int NOT NULL, booked_at timestamptz NOT NULL DEFAULT now())`
  yield* sql`INSERT INTO transfers (sender, receiver, currency, amount) VALUES
    ('ann', 'bob', 'EUR', 10), ('bob', 'ann', 'EUR', 20), ('bob', 'cy', 'EUR', 30),
    ('cy', 'ann', 'USD', 40), ('ann', 'cy', 'EUR', 50), ('cy', 'ann', 'EUR', 60)`
  const pages: Array<ReadonlyArray<number>> = []
  let cursor: string | undefined
  do {
    const page = yield* listTransfers("ann", cursor)
    pages.push(page.items.map((transfer) => transfer.amount))
    cursor = page.nextCursor // undefined after the last page
  } while (cursor !== undefined)
  return pages // [[10, 20], [50, 60]]
})
