import * as Outbox from "@effect-durable/pg/Outbox"
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Projector from "@effect-durable/projector/Projector"
import type * as Publisher from "@effect-durable/projector/Publisher"
import * as Telemetry from "@effect-durable/testing/Telemetry"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import { Webhook, WebhookVerificationError } from "standardwebhooks"
import * as WebhookPublisher from "../src/WebhookPublisher.js"
import * as WebhookSignature from "../src/WebhookSignature.js"
import { eventually, outboxRows, server, substrate } from "./support.js"

const secret = Redacted.make("webhook-secret-of-enough-bytes")
/** A secret in the Standard Webhooks form: `whsec_` and the base64 of a 24-byte key. */
const whsec = `whsec_${Buffer.from("twenty-four bytes of key").toString("base64")}`
const message = (id: string): OutboxWorker.OutboxMessage => ({
  id,
  topic: "order-placed",
  orderingKey: null,
  payload: { orderId: 7, total: 42 },
  headers: { traceparent: "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01" },
  createdAt: "2026-11-29 15:00:00.123456+00",
  attempt: 1,
  claim: { messageId: id, worker: "w", generation: 1 }
})

const publishTo =
  (url: string, options: Partial<WebhookPublisher.WebhookPublisherOptions> = {}) => (m: OutboxWorker.OutboxMessage) =>
    Effect.flatMap(WebhookPublisher.make({ url, secret, ...options }), (publisher) => publisher.publish(m)).pipe(
      Effect.provide(FetchHttpClient.layer)
    )

describe("Webhook publisher", () => {
  // On the live clock: the signature is dated by Effect's `Clock`, and checked against the system clock.
  it.live("POSTs the message as JSON with its id as Idempotency-Key and webhook-id, signed in the Standard Webhooks format", () =>
    Effect.gen(function*() {
      const { received, url } = yield* server((_, res) => res.writeHead(204).end())
      yield* publishTo(url)(message("41"))
      const [request] = received
      expect(JSON.parse(request!.body)).toMatchObject({
        id: "41",
        topic: "order-placed",
        attempt: 1,
        // The message's own headers, inside the signed body.
        headers: { traceparent: "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01" },
        payload: { orderId: 7, total: 42 }
      })
      expect(request!.headers["content-type"]).toMatch(/application\/json/)
      expect(request!.headers["idempotency-key"]).toBe("41")
      expect(request!.headers["webhook-id"]).toBe("41")
      expect(Math.abs(Number(request!.headers["webhook-timestamp"]) - Date.now() / 1000)).toBeLessThan(60)
      expect(request!.headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/)
      expect(request!.headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/)
      expect(WebhookSignature.verify(secret, request!.headers, request!.body)).toBe(true)
      expect(WebhookSignature.verify(secret, request!.headers, request!.body.replace("42", "43"))).toBe(false)
      expect(WebhookSignature.verify(secret, { ...request!.headers, "webhook-id": "42" }, request!.body)).toBe(false)
      expect(WebhookSignature.verify(Redacted.make("another secret of 16+ bytes"), request!.headers, request!.body))
        .toBe(false)
    }))

  it.live("a receiver verifies a delivery with the standardwebhooks package itself, for a whsec_ secret and for a raw one", () =>
    Effect.gen(function*() {
      const { received, url } = yield* server((_, res) => res.writeHead(200).end())
      yield* publishTo(url, { secret: Redacted.make(whsec) })(message("51"))
      yield* publishTo(url)(message("52"))
      const [standard, raw] = received
      // Exactly as a receiver does: the secret as configured, the raw body, the headers as received.
      const headers = (request: typeof standard) => request!.headers as Record<string, string>
      expect(new Webhook(whsec).verify(standard!.body, headers(standard))).toMatchObject({
        id: "51",
        payload: { orderId: 7 }
      })
      expect(new Webhook(Redacted.value(secret), { format: "raw" }).verify(raw!.body, headers(raw))).toMatchObject({
        id: "52"
      })
      // Each secret verifies only its own deliveries, and only their bodies.
      expect(() => new Webhook(whsec).verify(raw!.body, headers(raw))).toThrow(WebhookVerificationError)
      expect(() => new Webhook(whsec).verify(standard!.body.replace("7", "8"), headers(standard))).toThrow(
        WebhookVerificationError
      )
      expect(WebhookSignature.verify(Redacted.make(whsec), standard!.headers, standard!.body)).toBe(true)
      expect(WebhookSignature.verify(secret, standard!.headers, standard!.body)).toBe(false)
    }))

  it.effect("the signature is dated by Effect's Clock: one dated an hour from the receiver's clock is refused as a replay", () =>
    Effect.gen(function*() {
      const { received, url } = yield* server((_, res) => res.writeHead(200).end())
      const now = Date.now()
      yield* TestClock.setTime(now - 3_600_000)
      yield* publishTo(url)(message("61"))
      yield* TestClock.setTime(now)
      yield* publishTo(url)(message("62"))
      const [old, current] = received
      expect(old!.headers["webhook-timestamp"]).toBe(String(Math.floor((now - 3_600_000) / 1000)))
      expect(current!.headers["webhook-timestamp"]).toBe(String(Math.floor(now / 1000)))
      expect(WebhookSignature.verify(secret, old!.headers, old!.body)).toBe(false)
      expect(() =>
        new Webhook(Redacted.value(secret), { format: "raw" }).verify(old!.body, old!.headers as Record<string, string>)
      )
        .toThrow(/too old/)
      expect(WebhookSignature.verify(secret, current!.headers, current!.body)).toBe(true)
    }))

  it.effect("408, 429 and 5xx are retryable (Retry-After honoured); other 4xx are permanent", () =>
    Effect.gen(function*() {
      const statuses: Record<string, [number, Record<string, string>]> = {
        "1": [500, {}],
        "2": [503, { "retry-after": "7" }],
        "3": [429, { "retry-after": new Date(Date.now() + 60_000).toUTCString() }],
        "4": [408, {}],
        "5": [404, {}],
        "6": [400, {}]
      }
      const { url } = yield* server((request, res) => {
        const [status, headers] = statuses[JSON.parse(request.body).id]!
        res.writeHead(status, headers).end("no")
      })
      const publish = publishTo(url)
      const outcome = (id: string) => Effect.map(Effect.flip(publish(message(id))), (e) => e as Publisher.PublishError)
      expect(yield* outcome("1")).toMatchObject({ retryable: true, reason: `webhook ${url} answered 500` })
      expect(yield* outcome("2")).toMatchObject({ retryable: true, retryAfterMillis: 7000 })
      const dated = yield* outcome("3")
      expect(dated.retryable).toBe(true)
      expect(dated.retryAfterMillis).toBeGreaterThan(50_000)
      expect(yield* outcome("4")).toMatchObject({ retryable: true })
      expect(yield* outcome("5")).toMatchObject({ retryable: false, reason: `webhook ${url} answered 404` })
      expect(yield* outcome("6")).toMatchObject({ retryable: false })
    }))

  it.live("a timeout and an unreachable endpoint are retryable", () =>
    Effect.gen(function*() {
      const { url } = yield* server(() => undefined) // never answers
      const slow =
        (yield* Effect.flip(publishTo(url, { timeout: "200 millis" })(message("9")))) as Publisher.PublishError
      expect(slow).toMatchObject({ retryable: true })
      expect(slow.reason).toMatch(/did not answer/)
      const closed = (yield* Effect.flip(publishTo("http://127.0.0.1:1/hook")(message("10")))) as Publisher.PublishError
      expect(closed).toMatchObject({ retryable: true })
      expect(closed.reason).toMatch(/unreachable/)
    }).pipe(Effect.scoped))

  it.effect("a short secret, a whsec_ secret that is not the base64 of 16+ bytes, or a malformed URL is a typed configuration error", () =>
    Effect.gen(function*() {
      const refused = (secret: string) =>
        Effect.flip(WebhookPublisher.make({ url: "http://127.0.0.1/x", secret: Redacted.make(secret) }))
      expect(yield* refused("short")).toMatchObject({ _tag: "DurableConfigError", field: "webhook.secret" })
      expect(yield* refused("whsec_not base64 at all!")).toMatchObject({ field: "webhook.secret" })
      expect(yield* refused(`whsec_${Buffer.from("eight by").toString("base64")}`)).toMatchObject({
        field: "webhook.secret"
      })
      const url = yield* Effect.flip(WebhookPublisher.make({ url: "ftp://x", secret }))
      expect(url).toMatchObject({ field: "webhook.url" })
    }).pipe(Effect.provide(FetchHttpClient.layer)))

  it.layer(substrate())((it) => {
    it.effect("credentials and query tokens in the webhook URL reach the receiver but no row, span or log line", () =>
      Effect.gen(function*() {
        const PASSWORD = "canary-pass-5c1d"
        const TOKEN = "canary-token-9e2a"
        let calls = 0
        const { received, url } = yield* server((_, res) => res.writeHead(++calls === 1 ? 500 : 200).end())
        const secretUrl = url.replace("http://", `http://hook-user:${PASSWORD}@`) + `?token=${TOKEN}`
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const id = yield* outbox.enqueue("webhook-canary", {})
        const telemetry = Telemetry.make()
        const drain = Projector.drain({ topics: ["webhook-canary"], backoff: { min: "10 millis", max: "10 millis" } })
          .pipe(
            Effect.provide(
              WebhookPublisher.layer({ url: secretUrl, secret }).pipe(Layer.provide(FetchHttpClient.layer))
            ),
            telemetry.observed
          )
        const first = yield* drain
        expect(first).toMatchObject({ retried: 1 })
        // The failure as the row keeps it. With a 10 ms backoff the retry may already be
        // delivered (clearing `last_error`), even within that first drain: the failure history
        // keeps it either way.
        const [failed] = yield* sql<{ last_error: string | null }>`
          SELECT failures -> 0 ->> 'error' AS last_error FROM durable.outbox WHERE id = ${id}`
        expect(failed!.last_error).toBe(`webhook ${url}?token=REDACTED answered 500`)
        let delivered = first.delivered
        yield* eventually(Effect.map(drain, (counts) => (delivered += counts.delivered)), (total) => total === 1)
        // The receiver got both secrets, as a Basic credential and in the query.
        expect(received[1]!.headers.authorization).toBe(
          `Basic ${Buffer.from(`hook-user:${PASSWORD}`).toString("base64")}`
        )
        expect(received[1]!.url).toBe(`/hook?token=${TOKEN}`)
        expect(telemetry.spans.some((span) => span.name === "webhook.post")).toBe(true)
        expect(telemetry.everything()).not.toContain(PASSWORD)
        expect(telemetry.everything()).not.toContain(TOKEN)
        const rows = JSON.stringify([
          yield* outboxRows([id]),
          yield* sql`SELECT failures FROM durable.outbox WHERE id = ${id}`
        ])
        expect(rows).not.toContain(PASSWORD)
        expect(rows).not.toContain(TOKEN)
      }))

    it.effect("end to end: outbox -> projector -> webhook; a 503 is retried, then delivered and marked", () =>
      Effect.gen(function*() {
        let calls = 0
        const { received, url } = yield* server((_, res) => {
          calls++
          res.writeHead(calls === 1 ? 503 : 200).end()
        })
        const outbox = yield* Outbox.Outbox
        const id = yield* outbox.enqueue("webhook-e2e", { hello: "world" })
        const publisher = WebhookPublisher.layer({ url, secret }).pipe(Layer.provide(FetchHttpClient.layer))
        // The retry waits at least half the minimum backoff (250 ms): the first drain ends before it.
        const drain = Projector.drain({ topics: ["webhook-e2e"], backoff: { min: "500 millis", max: "500 millis" } })
          .pipe(
            Effect.provide(publisher)
          )
        const first = yield* drain
        expect(first).toMatchObject({ claimed: 1, retried: 1 })
        // Drains before the retry is due claim nothing; the one after it delivers.
        const second = yield* eventually(drain, (counts) => counts.claimed > 0)
        expect(second).toMatchObject({ claimed: 1, delivered: 1 })
        expect(received.map((r) => JSON.parse(r.body).id)).toEqual([id, id])
        expect(received.map((r) => JSON.parse(r.body).attempt)).toEqual([1, 2])
        // Every delivery of one message carries the same webhook-id: the receiver's dedup key.
        expect(received.map((r) => r.headers["webhook-id"])).toEqual([id, id])
      }))

    it.effect("the receiver gets the headers the producer set (a schedule's slot), signed: changing one breaks the signature", () =>
      Effect.gen(function*() {
        const { received, url } = yield* server((_, res) => res.writeHead(204).end())
        // The signature is dated by Effect's Clock: now, for the receiver's check.
        yield* TestClock.setTime(Date.now())
        const outbox = yield* Outbox.Outbox
        const slot = "2026-12-06T00:00:00.000Z"
        yield* outbox.enqueue("daily-summary", { report: "summary" }, {
          headers: { schedule: "daily-summary", "schedule-slot": slot }
        })
        const publisher = WebhookPublisher.layer({ url, secret }).pipe(Layer.provide(FetchHttpClient.layer))
        expect(yield* Projector.drain({ topics: ["daily-summary"] }).pipe(Effect.provide(publisher))).toMatchObject({
          delivered: 1
        })
        const [request] = received
        expect(JSON.parse(request!.body).headers).toMatchObject({ schedule: "daily-summary", "schedule-slot": slot })
        expect(WebhookSignature.verify(secret, request!.headers, request!.body)).toBe(true)
        const forged = request!.body.replace(slot, "2026-12-07T00:00:00.000Z")
        expect(forged).not.toBe(request!.body)
        expect(WebhookSignature.verify(secret, request!.headers, forged)).toBe(false)
      }))
  })
})
