// Keys and bodies are request data: they never reach span attributes, span events or log
// lines — neither the middleware's nor the platform's own server span, which here records
// every request header (HttpMiddleware.TracerHeaderFilter) unless its name is redacted
// (Idempotency.layerRedactKeyHeader, provided to the server, redacts the key's header).
import * as Telemetry from "@effect-durable/testing/Telemetry"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { freshAccount, send, server } from "./support.js"

describe("telemetry", () => {
  it.effect("no key, body or subject reaches a span or a log line, whatever the outcome", () =>
    Effect.gen(function*() {
      const telemetry = Telemetry.make()
      const KEY = "canary-key-5d1e"
      const NOTE = "canary-body-8f2a"
      const USER = "canary-user-c3b9"
      yield* telemetry.observed(Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(server({}, {}, { logRequests: true }))
        const account = freshAccount()
        const call = (body: string, key: string) =>
          Effect.provide(
            send(`/v1/accounts/${account}/notes`, { body, key, user: USER, headers: { "content-type": "text/plain" } }),
            context
          )
        expect((yield* call(NOTE, KEY)).status).toBe(200)
        expect((yield* call(NOTE, KEY)).headers["idempotent-replayed"]).toBe("true")
        expect((yield* call(`${NOTE}-changed`, KEY)).status).toBe(422)
        expect((yield* call(NOTE, `"${KEY}";p=1`)).status).toBe(400)
        const unmarked = yield* Effect.provide(
          send(`/v1/accounts/${account}/unmarked`, { key: KEY, user: USER }),
          context
        )
        expect(unmarked.status).toBe(201)
        const plain = yield* Effect.provide(send(`/plain/${account}`, { body: NOTE, key: KEY, user: USER }), context)
        expect(plain.status).toBe(200)
      })))
      const names = telemetry.spans.map((span) => span.name)
      expect(names).toContain("idempotency.request")
      expect(names).toContain("MutationLedger.begin")
      // The platform's server spans, with the request headers, the key's redacted.
      const serverSpans = telemetry.spans.filter((span) => span.kind === "server")
      expect(serverSpans.length).toBeGreaterThan(0)
      expect(serverSpans.some((span) => span.attributes.get("http.request.header.idempotency-key") === "<redacted>"))
        .toBe(true)
      // Log lines were seen: the platform's request log.
      expect(telemetry.logs.some((line) => line.includes("Sent HTTP response"))).toBe(true)
      const everything = telemetry.everything()
      for (const canary of [KEY, NOTE, USER]) expect(everything).not.toContain(canary)
    }), 120_000)
})
