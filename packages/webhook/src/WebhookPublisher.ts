/**
 * The projector's HTTP webhook publisher, on Effect's `HttpClient`: each message is POSTed as
 * JSON (its id, topic, ordering key, enqueue time, attempt, headers and payload), signed in the
 * Standard Webhooks format (`webhook-id` = the message id,
 * `webhook-timestamp`, `webhook-signature`; see `WebhookSignature`) and with its id as the
 * `Idempotency-Key` too, so the receiver can authenticate it with a stock library and drop
 * redeliveries. A 2xx response is a delivery; 408, 429, 5xx, network errors and timeouts are
 * retryable (honouring `Retry-After`); any other status is permanent.
 *
 * A URL's credentials and query are secrets: credentials travel as an `Authorization` header,
 * and wherever the URL is shown (errors, `last_error`, spans, logs) it is redacted.
 *
 * @since 0.2.0
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import { canonicalizeResult } from "@effect-durable/core/Fingerprint"
import type { OutboxMessage } from "@effect-durable/pg/OutboxWorker"
import { permanent, Publisher, type PublishError, retryable } from "@effect-durable/projector/Publisher"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HttpClient from "effect/http/HttpClient"
import type * as HttpClientError from "effect/http/HttpClientError"
import * as HttpClientRequest from "effect/http/HttpClientRequest"
import * as HttpTraceContext from "effect/http/HttpTraceContext"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as WebhookSignature from "./WebhookSignature.js"

export interface WebhookPublisherOptions {
  /** Where to POST; a function picks the URL per message (e.g. by topic). */
  readonly url: string | ((message: OutboxMessage) => string)
  /**
   * Signs every request: `whsec_<base64>` (the Standard Webhooks form) or any other string of
   * at least 16 bytes, used as the key's raw bytes (see `WebhookSignature`).
   */
  readonly secret: Redacted.Redacted<string>
  /** Longest wait for a response. Default 10 s. */
  readonly timeout?: Duration.Input
  /** Extra request headers. */
  readonly headers?: Readonly<Record<string, string>>
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

/** Retry-After as seconds or an HTTP date (against `now`, in milliseconds), in milliseconds. */
const retryAfter = (value: string | undefined, now: number): number | undefined => {
  if (value === undefined) return undefined
  const seconds = Number(value)
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}

const classify = (
  status: number,
  retryAfterHeader: string | undefined,
  shown: string,
  now: number
): PublishError | undefined => {
  if (status >= 200 && status < 300) return undefined
  if (status === 408 || status === 429 || status >= 500) {
    return retryable(`webhook ${shown} answered ${status}`, retryAfter(retryAfterHeader, now))
  }
  return permanent(`webhook ${shown} answered ${status}`)
}

/** Why a request or its response failed, without the URL the platform's own message carries. */
const clientFailure = ({ reason }: HttpClientError.HttpClientError, shown: string): PublishError => {
  // "TransportError" -> "Transport": what failed, not how the platform names it.
  const kind = reason._tag.replace(/Error$/, "")
  switch (reason._tag) {
    case "TransportError":
    case "EncodeError":
    case "InvalidUrlError": {
      const cause = reason.cause as { cause?: { code?: unknown }; code?: unknown } | undefined
      const detail = [cause?.code, cause?.cause?.code].find((c): c is string => typeof c === "string")
      return retryable(`webhook ${shown} unreachable: ${kind}${detail === undefined ? "" : ` (${detail})`}`)
    }
    default:
      return retryable(`webhook ${redactUrl(reason.request.url)} response failed: ${kind}`)
  }
}

export const make = (
  options: WebhookPublisherOptions
): Effect.Effect<Publisher["Service"], DurableConfigError, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const signer = yield* WebhookSignature.make(options.secret, "webhook.secret")
    if (typeof options.url === "string" && !/^https?:\/\//.test(options.url)) {
      return yield* new DurableConfigError({ field: "webhook.url", rule: "an http:// or https:// URL" })
    }
    const timeout = Duration.fromInputUnsafe(options.timeout ?? "10 seconds")
    // The platform's own request span records the full URL: ours (`webhook.post`) records it
    // redacted. Each request is scoped, so that closing the scope releases its connection.
    const client = HttpClient.withScope(yield* HttpClient.HttpClient)
    const send = (request: HttpClientRequest.HttpClientRequest) =>
      client.execute(request).pipe(Effect.provideService(HttpClient.TracerDisabledWhen, () => true))

    const publish = Effect.fn("webhook.post", { kind: "client", attributes: { "http.request.method": "POST" } })(
      function*(message: OutboxMessage) {
        const body = Result.getOrThrow(canonicalizeResult({
          id: message.id,
          topic: message.topic,
          orderingKey: message.orderingKey,
          createdAt: message.createdAt,
          attempt: message.attempt,
          // The producer's headers (a schedule's slot, a trace), inside the body so that the
          // signature covers them: a receiver trusts them as it trusts the payload.
          headers: message.headers,
          payload: message.payload
        }))
        const target = typeof options.url === "string" ? options.url : options.url(message)
        const shown = redactUrl(target)
        yield* Effect.annotateCurrentSpan("url.full", shown)
        const { authorization, url } = yield* Effect.try({
          try: () => splitCredentials(target),
          catch: () => permanent(`webhook URL ${shown} is not a URL`)
        })
        const span = yield* Effect.option(Effect.currentSpan)
        // Effect's Clock, so that a TestClock dates the signature.
        const now = yield* Clock.currentTimeMillis
        const request = HttpClientRequest.post(url).pipe(
          HttpClientRequest.setHeaders({
            ...options.headers,
            ...(authorization === undefined ? {} : { authorization }),
            // The receiver continues the trace of the span this runs in (webhook.post, a child
            // of projector.deliver, whose parent is the producer's span): `traceparent` and `b3`.
            ...Option.match(span, { onNone: () => ({}), onSome: HttpTraceContext.toHeaders }),
            "idempotency-key": message.id,
            "x-effect-durable-topic": message.topic,
            "x-effect-durable-attempt": String(message.attempt),
            ...signer.sign(message.id, now, body)
          }),
          HttpClientRequest.bodyText(body, "application/json")
        )
        const response = yield* send(request).pipe(
          Effect.timeoutOrElse({
            duration: timeout,
            orElse: () => Effect.fail(retryable(`webhook ${shown} did not answer in ${Duration.format(timeout)}`))
          }),
          Effect.catchTag("HttpClientError", (error) => Effect.fail(clientFailure(error, shown))),
          Effect.scoped
        )
        const failure = classify(response.status, response.headers["retry-after"], shown, now)
        if (failure !== undefined) return yield* failure
      }
    )

    return Publisher.of({ publish })
  })

export const layer = (
  options: WebhookPublisherOptions
): Layer.Layer<Publisher, DurableConfigError, HttpClient.HttpClient> => Layer.effect(Publisher, make(options))
