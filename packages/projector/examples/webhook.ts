// README "Webhook": deliver each message as a signed POST; receivers check the signature
// against the raw body with Webhook.verify.
import * as Webhook from "@effect-durable/projector/Webhook"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"

export const Deliver = (url: string, secret: Redacted.Redacted<string>) =>
  Webhook.layer({ url, secret }).pipe(Layer.provide(FetchHttpClient.layer)) // secret: at least 16 bytes

// The receiving side, with any HTTP server: the header and the body exactly as received.
export const accept = (secret: Redacted.Redacted<string>, signatureHeader: string, rawBody: string) =>
  Webhook.verify(secret, signatureHeader, rawBody) // constant time, 5-minute tolerance
