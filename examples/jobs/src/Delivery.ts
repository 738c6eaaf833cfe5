/**
 * The projector, a fiber of this process: it claims `transfer-completed` messages from the
 * outbox after their transaction committed and POSTs each to the notification service's
 * webhook (signed in the Standard Webhooks format; `webhook-id` and `Idempotency-Key` = the
 * message id), retrying with backoff until it answers 2xx. It starts after the server listens
 * (the receiver is in this process) and stops before it.
 */
import * as Projector from "@effect-durable/projector/Projector"
import * as WebhookPublisher from "@effect-durable/webhook/WebhookPublisher"
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import * as Layer from "effect/Layer"
import { baseUrl } from "./Instructions.js"
import { WEBHOOK_PATH } from "./Notifications.js"
import { TRANSFER_COMPLETED } from "./Transfers.js"

export const DeliveryLive = Layer.unwrap(
  Effect.gen(function*() {
    const url = yield* baseUrl
    const secret = yield* Config.Redacted("WEBHOOK_SECRET")
    return Projector.layer({ topics: [TRANSFER_COMPLETED], pollInterval: "1 second" }).pipe(
      Layer.provide(WebhookPublisher.layer({ url: `${url}${WEBHOOK_PATH}`, secret })),
      Layer.provide(FetchHttpClient.layer)
    )
  })
)
