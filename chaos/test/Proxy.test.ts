import { describe, expect, it } from "@effect/vitest"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { eventually } from "@effect-durable/testing/Eventually"
import * as SqlClient from "effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
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
