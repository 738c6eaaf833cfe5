/**
 * An HTTP webhook publisher on `@effect/platform`'s `HttpClient`: each message is POSTed as
 * JSON with its id as the `Idempotency-Key` and an HMAC-SHA256 signature over the timestamp
 * and body, so the receiver can authenticate it and drop redeliveries. A 2xx response is a
 * delivery; 408, 429, 5xx, network errors and timeouts are retryable (honouring
 * `Retry-After`); any other status is permanent.
 *
 * @since 0.1.0
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import { canonicalizeEither } from "@effect-durable/core/Fingerprint"
import type { OutboxMessage } from "@effect-durable/pg/OutboxWorker"
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { createHmac, timingSafeEqual } from "node:crypto"
import { permanent, Publisher, type PublishError, retryable } from "./Publisher.js"

export interface WebhookOptions {
  /** Where to POST; a function picks the URL per message (e.g. by topic). */
  readonly url: string | ((message: OutboxMessage) => string)
  /** Signs every request; at least 16 bytes. */
  readonly secret: Redacted.Redacted<string>
  /** Longest wait for a response. Default 10 s. */
  readonly timeout?: Duration.DurationInput
  /** Extra request headers. */
  readonly headers?: Readonly<Record<string, string>>
}

export const SIGNATURE_HEADER = "x-effect-durable-signature"

/** `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, the value of the signature header. */
export const sign = (secret: Redacted.Redacted<string>, body: string, unixSeconds: number): string =>
  `t=${unixSeconds},v1=${createHmac("sha256", Redacted.value(secret)).update(`${unixSeconds}.${body}`).digest("hex")}`

/**
 * For receivers: checks a signature header against the raw body, in constant time, and
 * refuses timestamps further than `toleranceSeconds` from now (replays of old requests).
 */
export const verify = (
  secret: Redacted.Redacted<string>,
  header: string,
  body: string,
  options: { readonly toleranceSeconds?: number; readonly now?: number } = {}
): boolean => {
  const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header)
  if (match === null) return false
  const t = Number(match[1])
  const now = options.now ?? Math.floor(Date.now() / 1000)
  if (Math.abs(now - t) > (options.toleranceSeconds ?? 300)) return false
  const expected = Buffer.from(sign(secret, body, t).slice(-64), "hex")
  return timingSafeEqual(expected, Buffer.from(match[2]!, "hex"))
}

/** Retry-After as seconds or an HTTP date, in milliseconds. */
const retryAfter = (value: string | undefined): number | undefined => {
  if (value === undefined) return undefined
  const seconds = Number(value)
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now())
}

const classify = (status: number, retryAfterHeader: string | undefined): PublishError | undefined => {
  if (status >= 200 && status < 300) return undefined
  if (status === 408 || status === 429 || status >= 500) {
    return retryable(`webhook answered ${status}`, retryAfter(retryAfterHeader))
  }
  return permanent(`webhook answered ${status}`)
}

export const make = (options: WebhookOptions): Effect.Effect<Publisher["Type"], DurableConfigError, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    if (Buffer.byteLength(Redacted.value(options.secret), "utf8") < 16) {
      return yield* new DurableConfigError({ field: "webhook.secret", rule: "at least 16 bytes" })
    }
    if (typeof options.url === "string" && !/^https?:\/\//.test(options.url)) {
      return yield* new DurableConfigError({ field: "webhook.url", rule: "an http:// or https:// URL" })
    }
    const timeout = Duration.decode(options.timeout ?? "10 seconds")
    const client = yield* HttpClient.HttpClient

    const publish = (message: OutboxMessage) =>
      Effect.gen(function*() {
        const body = Either.getOrThrow(canonicalizeEither({
          id: message.id,
          topic: message.topic,
          orderingKey: message.orderingKey,
          createdAt: message.createdAt,
          attempt: message.attempt,
          payload: message.payload
        }))
        const url = typeof options.url === "string" ? options.url : options.url(message)
        const request = HttpClientRequest.post(url).pipe(
          HttpClientRequest.setHeaders({
            // traceparent is set by HttpClient from the current span (projector.deliver, whose
            // parent is the producer's span), so the receiver continues the producer's trace.
            ...options.headers,
            "idempotency-key": message.id,
            "x-effect-durable-topic": message.topic,
            "x-effect-durable-attempt": String(message.attempt),
            [SIGNATURE_HEADER]: sign(options.secret, body, Math.floor(Date.now() / 1000))
          }),
          HttpClientRequest.bodyText(body, "application/json")
        )
        const response = yield* client.execute(request).pipe(
          Effect.timeoutFail({
            duration: timeout,
            onTimeout: () => retryable(`webhook did not answer in ${Duration.format(timeout)}`)
          }),
          Effect.catchTag("RequestError", (error) => Effect.fail(retryable(`webhook unreachable: ${error.message}`))),
          Effect.scoped
        )
        const failure = classify(response.status, response.headers["retry-after"])
        if (failure !== undefined) return yield* failure
      }).pipe(
        Effect.catchTag("ResponseError", (error) => Effect.fail(retryable(`webhook response failed: ${error.message}`)))
      )

    return Publisher.of({ publish })
  })

export const layer = (options: WebhookOptions): Layer.Layer<Publisher, DurableConfigError, HttpClient.HttpClient> =>
  Layer.effect(Publisher, make(options))
