import { eventually } from "@effect-durable/testing/Eventually"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import pg from "pg"
import * as Proxy from "../src/proxy.js"

const throughProxy = Effect.gen(function*() {
  const database = yield* TestDatabase.TestDatabase
  const url = new URL(Redacted.value(database.poolUrl))
  const proxy = yield* Effect.acquireRelease(
    Effect.promise(() => Proxy.start({ host: url.hostname, port: Number(url.port) })),
    (proxy) => Effect.promise(proxy.close)
  )
  url.port = String(proxy.port)
  const client = (use: (client: pg.Client) => Promise<string>) =>
    Effect.promise(async () => {
      const client = new pg.Client({ connectionString: url.toString() })
      client.on("error", () => undefined)
      await client.connect()
      try {
        return await use(client)
      } catch (error) {
        return error instanceof Error ? error.message : String(error)
      } finally {
        await client.end().catch(() => undefined)
      }
    })
  return { proxy, client }
})

describe("the chaos suite's commit-cutting proxy", () => {
  it.layer(TestDatabase.layerFresh())((it) => {
    it.effect("cuts the connection at COMMIT: forwarded, the transaction commits; withheld, it rolls back", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE cut (mode text)`
        const { client, proxy } = yield* throughProxy
        for (const mode of ["forward", "drop"] as const) {
          const cut = proxy.cutNextCommit(mode)
          const answer = yield* client(async (client) => {
            await client.query("BEGIN")
            await client.query("INSERT INTO cut VALUES ($1)", [mode])
            await client.query("COMMIT")
            return "answered"
          })
          // The client never learns the outcome.
          expect(answer).toMatch(/Connection terminated/)
          expect((yield* Effect.promise(() => cut)).mode).toBe(mode)
        }
        yield* eventually(sql<{ mode: string }>`SELECT mode FROM cut`, (rows) => rows.length === 1)
        expect(yield* sql<{ mode: string }>`SELECT mode FROM cut`).toEqual([{ mode: "forward" }])
      }))

    it.effect("cuts Effect's driver at COMMIT too, when COMMIT is only the Bind of a statement prepared earlier", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE cut_prepared (mode text)`
        const database = yield* TestDatabase.TestDatabase
        const { proxy } = yield* throughProxy
        const url = new URL(Redacted.value(database.poolUrl))
        url.port = String(proxy.port)
        for (const mode of ["forward", "drop"] as const) {
          // One connection: its first transaction prepares COMMIT, the second only binds it.
          const context = yield* Layer.build(PgClient.layer({ url: Redacted.make(url.toString()), maxConnections: 1 }))
          const client = Context.get(context, SqlClient.SqlClient)
          yield* client.withTransaction(client`INSERT INTO cut_prepared VALUES ('warm-up')`)
          const cut = proxy.cutNextCommit(mode)
          const outcome = yield* Effect.result(
            client.withTransaction(client`INSERT INTO cut_prepared VALUES (${mode})`)
          )
          // The client never learns the outcome.
          expect(outcome._tag).toBe("Failure")
          expect((yield* Effect.promise(() => cut)).mode).toBe(mode)
        }
        yield* eventually(
          sql<{ mode: string }>`SELECT mode FROM cut_prepared WHERE mode <> 'warm-up'`,
          (rows) => rows.length === 1
        )
        expect(yield* sql<{ mode: string }>`SELECT mode FROM cut_prepared WHERE mode <> 'warm-up'`).toEqual([{
          mode: "forward"
        }])
      }))

    it.effect("passes everything else unchanged, messages split across reads included", () =>
      Effect.gen(function*() {
        const { client } = yield* throughProxy
        const big = "x".repeat(300_000)
        const answer = yield* client(async (client) => {
          await client.query("BEGIN")
          const { rows } = await client.query<{ n: number }>("SELECT length($1::text) AS n", [big])
          await client.query("COMMIT")
          return String(rows[0]!.n)
        })
        expect(answer).toBe(String(big.length))
      }))
  })
})
