/**
 * Two accounts for the copy-paste curl lines, opened once per database: alice's and bob's.
 * (The demo opens its own, through the API.)
 */
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

export interface SeedAccount {
  readonly id: number
  readonly revision: number
}

const seed = Effect.fn("Seed.seed")(function*(owner: string, name: string, balance: number) {
  const sql = yield* SqlClient.SqlClient
  return yield* sql.withTransaction(Effect.gen(function*() {
    // One seeding at a time, even with two servers starting on one database.
    yield* sql`SELECT pg_advisory_xact_lock(hashtext('example seed'))`
    const [found] = yield* sql<SeedAccount>`
      SELECT id, revision FROM accounts WHERE owner = ${owner} AND name = ${name} ORDER BY id LIMIT 1`
    if (found !== undefined) return found
    const [opened] = yield* sql<SeedAccount>`
      INSERT INTO accounts (owner, name, balance) VALUES (${owner}, ${name}, ${balance}) RETURNING id, revision`
    yield* sql`INSERT INTO entries (account_id, amount) VALUES (${opened!.id}, ${balance})`
    return opened!
  }))
})

export const seedAccounts = Effect.all({
  alice: seed("alice", "Alice's checking", 100_000),
  bob: seed("bob", "Bob's savings", 50_000)
}).pipe(Effect.orDie)
