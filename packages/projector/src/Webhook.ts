/**
 * An HTTP webhook publisher on `@effect/platform`'s `HttpClient`: each message is POSTed as
 * JSON with its id as the `Idempotency-Key` and an HMAC-SHA256 signature over the timestamp
 * and body, so the receiver can authenticate it and drop redeliveries. A 2xx response is a
 * delivery; 408, 429, 5xx, network errors and timeouts are retryable (honouring
 * `Retry-After`); any other status is permanent.
 *
 * A URL's credentials and query are secrets: credentials travel as an `Authorization` header,
 * and wherever the URL is shown (errors, `last_error`, spans, logs) it is redacted.
 *
 * @since 0.1.0
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import { canonicalizeResult } from "@effect-durable/core/Fingerprint"
import type { OutboxMessage } from "@effect-durable/pg/OutboxWorker"
import * as HttpClient from "effect/http/HttpClient"
import type * as HttpClientError from "effect/http/HttpClientError"
import * as HttpClientRequest from "effect/http/HttpClientRequest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
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
  readonly timeout?: Duration.Input
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

/**
 * A URL as it may be shown: no user or password, every query value replaced, no fragment.
 * `https://u:p@hooks.example/in?token=abc` -> `https://hooks.example/in?token=REDACTED`.
 */
export const redactUrl = (url: string): string => {
  try {
    const parsed = new URL(url)
    parsed.username = ""
    parsed.password = ""
    parsed.hash = ""
    for (const name of new Set(parsed.searchParams.keys())) parsed.searchParams.set(name, "REDACTED")
    return parsed.toString()
  } catch {
    return "(an unparsable URL)"
  }
}

/** The URL without its credentials, and those credentials as a Basic `Authorization` value. */
const splitCredentials = (url: string): { readonly url: string; readonly authorization?: string } => {
  const parsed = new URL(url)
  if (parsed.username === "" && parsed.password === "") return { url }
  const user = decodeURIComponent(parsed.username)
  const password = decodeURIComponent(parsed.password)
  parsed.username = ""
  parsed.password = ""
  return { url: parsed.toString(), authorization: `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}` }
}

/** Retry-After as seconds or an HTTP date, in milliseconds. */
const retryAfter = (value: string | undefined): number | undefined => {
  if (value === undefined) return undefined
  const seconds = Number(value)
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now())
}

const classify = (status: number, retryAfterHeader: string | undefined, shown: string): PublishError | undefined => {
  if (status >= 200 && status < 300) return undefined
  if (status === 408 || status === 429 || status >= 500) {
    return retryable(`webhook ${shown} answered ${status}`, retryAfter(retryAfterHeader))
  }
  return permanent(`webhook ${shown} answered ${status}`)
}

/** Why a request failed, without the URL the platform's own message carries. */
const transportFailure = (error: HttpClientError.RequestError, shown: string) => {
  const code = (error.cause as { cause?: { code?: unknown }; code?: unknown } | undefined)
  const detail = [code?.code, code?.cause?.code].find((c): c is string => typeof c === "string")
  return retryable(`webhook ${shown} unreachable: ${error.reason}${detail === undefined ? "" : ` (${detail})`}`)
}

export const make = (options: WebhookOptions): Effect.Effect<Publisher["Service"], DurableConfigError, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    if (Buffer.byteLength(Redacted.value(options.secret), "utf8") < 16) {
      return yield* new DurableConfigError({ field: "webhook.secret", rule: "at least 16 bytes" })
    }
    if (typeof options.url === "string" && !/^https?:\/\//.test(options.url)) {
      return yield* new DurableConfigError({ field: "webhook.url", rule: "an http:// or https:// URL" })
    }
    const timeout = Duration.fromInputUnsafe(options.timeout ?? "10 seconds")
    // The platform's own request span records the full URL: ours records it redacted.
    const client = HttpClient.withTracerDisabledWhen(yield* HttpClient.HttpClient, () => true)

    const publish = (message: OutboxMessage) =>
      Effect.gen(function*() {
        const body = Result.getOrThrow(canonicalizeResult({
          id: message.id,
          topic: message.topic,
          orderingKey: message.orderingKey,
          createdAt: message.createdAt,
          attempt: message.attempt,
          payload: message.payload
        }))
        const target = typeof options.url === "string" ? options.url : options.url(message)
        const shown = redactUrl(target)
        yield* Effect.annotateCurrentSpan("url.full", shown)
        const { authorization, url } = yield* Effect.try({
          try: () => splitCredentials(target),
          catch: () => permanent(`webhook URL ${shown} is not a URL`)
        })
        const span = yield* Effect.currentSpan.pipe(Effect.option)
        const request = HttpClientRequest.post(url).pipe(
          HttpClientRequest.setHeaders({
            ...options.headers,
            ...(authorization === undefined ? {} : { authorization }),
            // The receiver continues the trace of the span this runs in (projector.deliver,
            // whose parent is the producer's span).
            ...(span._tag === "Some"
              ? { traceparent: `00-${span.value.traceId}-${span.value.spanId}-${span.value.sampled ? "01" : "00"}` }
              : {}),
            "idempotency-key": message.id,
            "x-effect-durable-topic": message.topic,
            "x-effect-durable-attempt": String(message.attempt),
            [SIGNATURE_HEADER]: sign(options.secret, body, Math.floor(Date.now() / 1000))
          }),
          HttpClientRequest.bodyText(body, "application/json")
        )
        const response = yield* client.execute(request).pipe(
          Effect.timeoutOrElse({
            duration: timeout,
            orElse: () => Effect.fail(retryable(`webhook ${shown} did not answer in ${Duration.format(timeout)}`))
          }),
          Effect.catchTag("RequestError", (error) => Effect.fail(transportFailure(error, shown))),
          Effect.scoped
        )
        const failure = classify(response.status, response.headers["retry-after"], shown)
        if (failure !== undefined) return yield* failure
      }).pipe(
        Effect.catchTag("ResponseError", (error) => Effect.fail(retryable(`webhook ${redactUrl(error.request.url)} response failed: ${error.reason}`))),
        Effect.withSpan("webhook.post", {
          kind: "client",
          captureStackTrace: false,
          attributes: { "http.request.method": "POST" }
        })
      )

    return Publisher.of({ publish })
  })

export const layer = (options: WebhookOptions): Layer.Layer<Publisher, DurableConfigError, HttpClient.HttpClient> =>
  Layer.effect(Publisher, make(options))
