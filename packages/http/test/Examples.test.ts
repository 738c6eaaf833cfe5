// The README's "HTTP idempotency" example, served on 127.0.0.1 and driven as a client would.
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import * as Http from "node:http"
import { PaymentsRoutes } from "../examples/payments.js"
import { json, send } from "./support.js"

const Payments = Layer.effectDiscard(
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE payments (id serial PRIMARY KEY, amount int NOT NULL)`)
)

const Served = HttpRouter.serve(PaymentsRoutes, { disableLogger: true, disableListenLog: true }).pipe(
  Layer.provideMerge(NodeHttpServer.layer(Http.createServer, { port: 0, host: "127.0.0.1" })),
  Layer.provide(Payments),
  Layer.provideMerge(TestSubstrate.layer())
)

// The README shows this file verbatim (packages/testing/test/Readme.test.ts checks it).
describe("the README example", () => {
  it.layer(Served, { timeout: "2 minutes" })((it) => {
    it.effect("payments: a retry replays the first response, a changed retry is 422, one row and one message", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const call = { body: `{"amount":250}`, key: "pay-1", headers: { "x-tenant": "acme" } }
        const first = yield* send("/payments", call)
        const retry = yield* send("/payments", call)
        const changed = yield* send("/payments", { ...call, body: `{"amount":300}` })
        expect([first.status, json(first)]).toEqual([201, { id: 1, amount: 250 }])
        expect([retry.status, retry.headers["idempotent-replayed"], retry.body.equals(first.body)]).toEqual([
          201,
          "true",
          true
        ])
        expect(changed.status).toBe(422)
        expect((yield* send("/payments", { body: `{"amount":250}`, headers: { "x-tenant": "acme" } })).status).toBe(400)
        const [counts] = yield* sql<{ payments: number; messages: number }>`
          SELECT (SELECT count(*)::int FROM payments) AS payments,
                 (SELECT count(*)::int FROM durable.outbox_messages WHERE topic = 'payment-created') AS messages`
        expect(counts).toEqual({ payments: 1, messages: 1 })
      }))
  })
})
