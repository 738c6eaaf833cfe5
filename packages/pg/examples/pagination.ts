// README "Pagination": page through a tenant's orders with signed cursors.
import * as Keyset from "@effect-durable/pg/Keyset"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"

export const listOrders = (tenant: string, cursor?: string) =>
  Effect.flatMap(Keyset.Keyset, (keyset) =>
    keyset.page<{ id: string; total: number }>({
      table: "orders",
      subject: tenant, // the cursor only works for this tenant...
      where: { tenant }, // ...and these filters
      limit: 2,
      ...(cursor === undefined ? {} : { cursor })
    }))

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS orders (
    id bigserial PRIMARY KEY, tenant text NOT NULL, total int, created_at timestamptz NOT NULL DEFAULT now())`
  yield* sql`INSERT INTO orders (tenant, total) SELECT 'acme', n FROM generate_series(1, 5) n`
  const pages: Array<ReadonlyArray<number>> = []
  let cursor: string | undefined
  do {
    const page = yield* listOrders("acme", cursor)
    pages.push(page.items.map((order) => order.total))
    cursor = page.nextCursor // undefined after the last page
  } while (cursor !== undefined)
  return pages // [[5, 4], [3, 2], [1]]
})
