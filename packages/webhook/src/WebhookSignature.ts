/**
 * Webhook signatures in the Standard Webhooks format (https://www.standardwebhooks.com/),
 * computed and checked by the `standardwebhooks` package: `webhook-signature: v1,<base64
 * HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>">`, so a receiver verifies with that
 * library, or any Standard Webhooks implementation, and the secret it shares with the publisher.
 *
 * A secret is `whsec_<base64>` (the Standard Webhooks form: the key is the decoded bytes; a
 * receiver passes it to `new Webhook(secret)` as is) or any other string of at least 16 bytes,
 * whose UTF-8 bytes are the key (a receiver passes them with `{ format: "raw" }`).
 *
 * @since 0.2.0
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import { Webhook } from "standardwebhooks"

/** The three headers of a signed request, as the Standard Webhooks specification names them. */
export const ID_HEADER = "webhook-id"
export const TIMESTAMP_HEADER = "webhook-timestamp"
export const SIGNATURE_HEADER = "webhook-signature"

export interface SignatureHeaders {
  /** The message id: the same on every delivery of one message. */
  readonly "webhook-id": string
  /** When this delivery was signed, in unix seconds. */
  readonly "webhook-timestamp": string
  /** `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`. */
  readonly "webhook-signature": string
}

/** Signs deliveries with one secret, decoded once. */
export interface Signer {
  /** The headers that sign `body` as message `id` at `timestampMillis` (unix milliseconds). */
  readonly sign: (id: string, timestampMillis: number, body: string) => SignatureHeaders
}

export const SECRET_PREFIX = "whsec_"
export const MIN_SECRET_BYTES = 16

const SECRET_RULE =
  `"${SECRET_PREFIX}" followed by the base64 of at least ${MIN_SECRET_BYTES} bytes, or any other string of at least ${MIN_SECRET_BYTES} bytes`
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/

/** The library's signer for a secret in either form, or the rule the secret breaks. */
const webhookOf = (secret: Redacted.Redacted<string>, field: string): Result.Result<Webhook, DurableConfigError> => {
  const value = Redacted.value(secret)
  const refused = Result.fail(new DurableConfigError({ field, rule: SECRET_RULE }))
  if (value.startsWith(SECRET_PREFIX)) {
    const encoded = value.slice(SECRET_PREFIX.length)
    if (!BASE64.test(encoded) || Buffer.from(encoded, "base64").length < MIN_SECRET_BYTES) return refused
    return Result.succeed(new Webhook(value))
  }
  const key = new TextEncoder().encode(value)
  return key.length < MIN_SECRET_BYTES ? refused : Result.succeed(new Webhook(key, { format: "raw" }))
}

/** A signer for `secret`; a secret of neither form is a `DurableConfigError` naming `field`. */
export const make = (
  secret: Redacted.Redacted<string>,
  field = "webhook.secret"
): Effect.Effect<Signer, DurableConfigError> =>
  Effect.map(Effect.fromResult(webhookOf(secret, field)), (webhook) => ({
    sign: (id, timestampMillis, body) => ({
      [ID_HEADER]: id,
      [TIMESTAMP_HEADER]: String(Math.floor(timestampMillis / 1000)),
      [SIGNATURE_HEADER]: webhook.sign(id, new Date(timestampMillis), body)
    })
  }))

/**
 * For receivers: whether a request's headers sign its raw body with `secret`, checked by
 * `standardwebhooks` (constant time; a timestamp more than 5 minutes from the receiver's
 * clock is refused, so an old request cannot be replayed). A plain function for any HTTP
 * server; `headers` as the server has them (names in any case). A secret the publisher
 * would refuse verifies nothing.
 */
export const verify = (
  secret: Redacted.Redacted<string>,
  headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>,
  rawBody: string
): boolean => {
  const webhook = webhookOf(secret, "secret")
  if (Result.isFailure(webhook)) return false
  const signed: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers)) {
    if (typeof value === "string") signed[name.toLowerCase()] = value
  }
  try {
    webhook.success.verify(rawBody, signed, { jsonParse: false })
    return true
  } catch {
    return false
  }
}
