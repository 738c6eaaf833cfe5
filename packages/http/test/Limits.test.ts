// The two size limits: a request body over `maxRequestBytes` is 413 before anything runs,
// whether or not it declares its length; a response over `maxResponseBytes` is never
// "committed but not replayable": it is rolled back and answered 500.
import { describe, expect, it } from "@effect/vitest"
import * as SqlClient from "effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import { executions, freshAccount, json, recordsOf, send, server, transfersOf } from "./support.js"

const LIMIT = 64 * 1024

describe("size limits", () => {
  it.layer(server({ maxRequestBytes: LIMIT, maxResponseBytes: LIMIT }), { timeout: "2 minutes" })((it) => {
    it.effect("a body over the limit is 413 with Connection: close, with or without Content-Length: nothing runs, nothing is stored", () =>
      Effect.gen(function*() {
        const account = freshAccount()
        const body = `{"amount":1,"pad":"${"x".repeat(LIMIT)}"}`
        for (const chunked of [false, true]) {
          const reply = yield* send(`/v1/accounts/${account}/transfers`, { body, chunked, key: `big-${chunked}`, user: "alice" })
          expect(reply.status).toBe(413)
          expect(reply.headers.connection).toBe("close")
          expect(json(reply)).toMatchObject({ code: "request-body-too-large", status: 413 })
          expect(yield* recordsOf("POST /v1/accounts/:account/transfers", `big-${chunked}`)).toBe(0)
        }
        // 20 MiB without Content-Length: the server drains a few MiB, answers, and cuts the rest.
        const huge = yield* send(`/v1/accounts/${account}/transfers`, {
          body: "x".repeat(20 * 1024 * 1024),
          chunked: true,
          key: "huge",
          user: "alice"
        })
        expect(huge.status).toBe(413)
        expect(executions(account)).toBe(0)
        expect(yield* transfersOf(account)).toBe(0)
        // A body at the limit is read whole, and the key is free for the request that fits.
        const fits = yield* send(`/v1/accounts/${account}/transfers`, { body: `{"amount":1}`, key: "big-false", user: "alice" })
        expect(fits.status).toBe(201)
      }))

    it.effect("a response over the store limit is rolled back and answered 500; the retry runs again", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const account = freshAccount()
        for (let i = 0; i < 2; i++) {
          const reply = yield* send(`/v1/accounts/${account}/large`, { key: "large", user: "alice" })
          expect(reply.status).toBe(500)
          expect(json(reply)).toMatchObject({ code: "response-not-storable" })
        }
        expect(executions(account)).toBe(2)
        expect(yield* transfersOf(account)).toBe(0)
        const [records] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.mutation_records WHERE key = 'large'`
        expect(records!.n).toBe(0)
      }))
  })
})
