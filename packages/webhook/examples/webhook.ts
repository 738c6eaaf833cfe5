// README "Webhook": deliver each message as a POST signed in the Standard Webhooks format;
// a receiver checks the headers against the raw body with any Standard Webhooks library.
import * as WebhookPublisher from "@effect-durable/webhook/WebhookPublisher"
import * as WebhookSignature from "@effect-durable/webhook/WebhookSignature"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { Webhook } from "standardwebhooks"

// secret: "whsec_<base64>" (the Standard Webhooks form), or any other string of 16+ bytes.
export const Deliver = (url: string, secret: Redacted.Redacted<string>) =>
  WebhookPublisher.layer({ url, secret }).pipe(Layer.provide(FetchHttpClient.layer))

// The receiving side, with any HTTP server: the headers and the body exactly as received.
export const accept = (secret: Redacted.Redacted<string>, headers: Record<string, string>, rawBody: string) =>
  WebhookSignature.verify(secret, headers, rawBody) // constant time, 5-minute tolerance

// Or a service without effect-durable, with the stock `standardwebhooks` package: a whsec_
// secret as it is (a raw one: new Webhook(new TextEncoder().encode(secret), { format: "raw" })).
// Returns the parsed body; throws WebhookVerificationError if the signature does not verify.
export const acceptStock = (whsecSecret: string, headers: Record<string, string>, rawBody: string) =>
  new Webhook(whsecSecret).verify(rawBody, headers)
