// Idempotency.wrapper on an HttpRouter route added under a prefix (the operation is the full
// route pattern, the prefix included) and on a whole HttpEffect outside any router (the
// operation's route given by hand).
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { describe, expect, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import * as Http from "node:http"
import * as Idempotency from "../src/Idempotency.js"
import { Subject } from "../src/Subject.js"
import { recordsOf, send, serve, verify } from "./support.js"

/** Provides the request's Subject to a handler (a whole HttpEffect has no route middleware). */
const identified = <E, R>(handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
  Effect.provideServiceEffect(
    handler,
    Subject,
    Effect.map(HttpServerRequest.HttpServerRequest, (request) => verify(request.headers.authorization))
  )

/** Counts its runs in a table (rolled back with the transaction) and echoes the body. */
const echo = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const request = yield* HttpServerRequest.HttpServerRequest
  yield* Effect.orDie(sql`INSERT INTO echoes DEFAULT VALUES`)
  const [count] = yield* Effect.orDie(sql<{ n: number }>`SELECT count(*)::int AS n FROM echoes`)
  return HttpServerResponse.text(`${count!.n}: ${yield* Effect.orDie(request.text)}`)
})

const Echoes = Layer.effectDiscard(
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE echoes (id serial PRIMARY KEY)`)
)

const PrefixedRoute = serve(
  HttpRouter.addAll(
    Effect.map(Idempotency.wrapper(), (idempotent) => [
      HttpRouter.route("POST", "/accounts/:account/echo", identified(idempotent.required(echo)))
    ]),
    { prefix: "/v2" }
  )
).pipe(Layer.provide(Echoes), Layer.provideMerge(TestSubstrate.layer()))

const WholeApp = Layer.unwrap(Effect.gen(function*() {
  const idempotent = yield* Idempotency.wrapper()
  return HttpServer.serve(identified(idempotent.optional(echo, { route: "/anything" }))).pipe(
    Layer.provide(Idempotency.layerRedactKeyHeader()),
    Layer.provideMerge(NodeHttpServer.layer(Http.createServer, { port: 0, host: "127.0.0.1" }))
  )
})).pipe(Layer.provide(Echoes), Layer.provideMerge(TestSubstrate.layer()))

describe("Idempotency.wrapper on a prefixed HttpRouter route and on a whole HttpEffect", () => {
  layer(PrefixedRoute, { timeout: "2 minutes" })((it) => {
    it.effect("an HttpRouter route under a prefix: first, replay, 422; the operation is the full pattern", () =>
      Effect.gen(function*() {
        const call = (body: string) =>
          send("/v2/accounts/7/echo", {
            body,
            key: "classic",
            user: "alice",
            headers: { "content-type": "text/plain" }
          })
        const first = yield* call("hello")
        expect([first.status, first.text]).toEqual([200, "1: hello"])
        const again = yield* call("hello")
        expect([again.text, again.headers["idempotent-replayed"]]).toEqual(["1: hello", "true"])
        expect((yield* call("other")).status).toBe(422)
        expect(yield* recordsOf("POST /v2/accounts/:account/echo", "classic")).toBe(1)
        expect((yield* send("/v2/accounts/7/echo", { body: "x", user: "alice" })).status).toBe(400)
      }))
  })

  layer(WholeApp, { timeout: "2 minutes" })((it) => {
    it.effect("a whole HttpEffect with its route given: keyed requests replay, others run every time", () =>
      Effect.gen(function*() {
        const call = (path: string, key?: string) =>
          send(path, {
            body: "hi",
            user: "alice",
            headers: { "content-type": "text/plain" },
            ...(key === undefined ? {} : { key })
          })
        expect((yield* call("/a", "whole")).text).toBe("1: hi")
        const again = yield* call("/a", "whole")
        expect([again.text, again.headers["idempotent-replayed"]]).toEqual(["1: hi", "true"])
        // The path is part of the fingerprint, not of the operation: another path with the key is 422.
        expect((yield* call("/b", "whole")).status).toBe(422)
        expect((yield* call("/a")).text).toBe("2: hi")
        expect(yield* recordsOf("POST /anything", "whole")).toBe(1)
      }))
  })
})
