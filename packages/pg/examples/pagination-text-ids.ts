// docs/pagination.md "Text ids": page tables whose ids are text, char(26) or citext, as
// Prisma, Rails and TypeORM make them, without changing a column's type.
import * as Keyset from "@effect-durable/pg/Keyset"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

const allPages = (request: Omit<Keyset.PageRequest, "cursor">) =>
  Effect.gen(function*() {
    const keyset = yield* Keyset.Keyset
    const ids: Array<string> = []
    let cursor: string | undefined
    do {
      const page = yield* keyset.page<{ id: string }>(cursor === undefined ? request : { ...request, cursor })
      ids.push(...page.items.map((row) => row.id.trimEnd())) // char(26) comes back padded
      cursor = page.nextCursor
    } while (cursor !== undefined)
    return ids
  })

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // A char(26) id: its type bounds it.
  yield* sql`CREATE TABLE IF NOT EXISTS receipts (id char(26) PRIMARY KEY, created_at timestamptz NOT NULL)`
  // A text id, bounded by a CHECK added without a rewrite or a long lock.
  yield* sql`CREATE TABLE IF NOT EXISTS members (id text PRIMARY KEY, created_at timestamptz NOT NULL)`
  yield* sql`ALTER TABLE members ADD CONSTRAINT members_id_length CHECK (length(id) <= 26) NOT VALID`
  yield* sql`ALTER TABLE members VALIDATE CONSTRAINT members_id_length`
  // A text id nothing in the schema bounds: the bound is declared with the request.
  yield* sql`CREATE TABLE IF NOT EXISTS comments (id text PRIMARY KEY, created_at timestamptz NOT NULL)`
  for (const table of ["receipts", "members", "comments"]) {
    yield* sql`INSERT INTO ${sql(table)} (id, created_at) VALUES
      ('01JAAAAAAAAAAAAAAAAAAAAAAA', '2026-12-01'), ('01JBBBBBBBBBBBBBBBBBBBBBBB', '2026-12-02'),
      ('01JCCCCCCCCCCCCCCCCCCCCCCC', '2026-12-03')`
  }
  const receipts = yield* allPages({ table: "receipts", subject: "acct-1", limit: 2 })
  const members = yield* allPages({ table: "members", subject: "acct-1", limit: 2 })
  const comments = yield* allPages({
    table: "comments",
    subject: "acct-1",
    order: { maxLength: { tieBreaker: 26 } }, // checked against the rows: a longer id refuses page 1
    limit: 2
  })
  return { receipts, members, comments } // each newest first: CCC…, BBB…, AAA…
})
