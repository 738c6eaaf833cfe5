// The options: decoded when the middleware is built (a bad one is a DurableConfigError
// naming it), and each one taking effect on a real server.
import { describe, expect, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Idempotency from "../src/Idempotency.js"
import { executions, freshAccount, json, send, server, TestApi } from "./support.js"

class PutApi extends HttpApi.make("put").add(
  HttpApiGroup.make("g").add(
    HttpApiEndpoint.put("replace", "/things", { success: Schema.String }).pipe(Idempotency.endpoint({ required: true }))
  )
) {}

describe("options", () => {
  layer(server(), { timeout: "2 minutes" })((it) => {
    it.effect("a bad option fails the middleware when it is built, with DurableConfigError naming the option", () =>
      Effect.gen(function*() {
        const build = (options: Idempotency.Options) =>
          Effect.flip(Effect.scoped(Layer.build(Idempotency.layer(TestApi, options))))
        const cases: ReadonlyArray<readonly [Idempotency.Options, string]> = [
          [{ header: "Idempotency Key" }, "idempotency.header"],
          [{ maxKeyLength: 256 }, "idempotency.maxKeyLength"],
          [{ minKeyLength: 10, maxKeyLength: 5 }, "idempotency.minKeyLength"],
          [{ maxResponseBytes: 8 * 1024 * 1024 }, "idempotency.maxResponseBytes"],
          [{ maxJsonDepth: 513 }, "idempotency.maxJsonDepth"],
          [{ maxJsonDepth: 0 }, "idempotency.maxJsonDepth"],
          [{ storedHeaders: ["content-type", "Set-Cookie"] }, "idempotency.storedHeaders[1]"],
          [{ methods: ["GET" as "POST"] }, "idempotency.methods[0]"],
          [{ inFlight: "later" as "wait" }, "idempotency.inFlight"]
        ]
        for (const [options, field] of cases) {
          expect(yield* build(options)).toMatchObject({ _tag: "DurableConfigError", field })
        }
        const put = yield* Effect.flip(Effect.scoped(Layer.build(Idempotency.layer(PutApi))))
        expect(put).toMatchObject({ _tag: "DurableConfigError", field: "g.replace" })
        expect(put.rule).toContain("PUT /things")
        // With PUT among the methods it builds.
        yield* Effect.scoped(Layer.build(Idempotency.layer(PutApi, { methods: ["PUT"] })))
        const wrapper = yield* Effect.flip(Idempotency.wrapper({ retryAfterSeconds: -1 }))
        expect(wrapper).toMatchObject({ _tag: "DurableConfigError", field: "idempotency.retryAfterSeconds" })
      }))
  })

  layer(
    server({
      header: "X-Request-Key",
      replayHeader: "X-Replayed",
      storedHeaders: ["Content-Type", "X-Request-Id"],
      retryAfterSeconds: 7,
      problemTypeBase: "https://docs.example.com/errors#",
      maxKeyLength: 8
    }),
    { timeout: "2 minutes" }
  )((it) => {
    it.effect("the key's header, the replay header, the stored headers, Retry-After, problem types and key bounds take effect", () =>
      Effect.gen(function*() {
        const account = freshAccount()
        const path = `/v1/accounts/${account}/headers`
        const missing = yield* send(path, { key: "ignored", user: "alice" })
        expect(json(missing)).toMatchObject({
          status: 400,
          type: "https://docs.example.com/errors#idempotency-key-missing",
          detail: "This endpoint requires the X-Request-Key header."
        })
        const tooLong = yield* send(path, { user: "alice", headers: { "x-request-key": "123456789" } })
        expect(json(tooLong)).toMatchObject({
          code: "idempotency-key-invalid",
          detail: "a key has at most 8 characters"
        })
        const first = yield* send(path, { user: "alice", headers: { "x-request-key": "k" } })
        const again = yield* send(path, { user: "alice", headers: { "x-request-key": "k" } })
        expect(again.headers["x-replayed"]).toBe("true")
        expect(again.headers["idempotent-replayed"]).toBeUndefined()
        expect(again.headers["x-request-id"]).toBe(first.headers["x-request-id"])
        expect(first.headers.location).toBeDefined()
        expect(again.headers.location).toBeUndefined()
        expect(again.body.equals(first.body)).toBe(true)
        expect(executions(account)).toBe(1)
      }))
  })
})
