/**
 * The notification service, a webhook receiver (in this process for the demo; in real life
 * another service). The projector POSTs every `transfer-completed` message here through the
 * webhook publisher: signed (Standard Webhooks headers), at least once. The receiver checks the
 * signature against the raw body, then applies the delivery once through the inbox: a
 * redelivery (a projector that retried after a lost answer, or an operator's replay) finds its
 * receipt and changes nothing.
 */
import * as Inbox from "@effect-durable/pg/Inbox"
import * as WebhookSignature from "@effect-durable/webhook/WebhookSignature"
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { format } from "./Money.js"

export const WEBHOOK_PATH = "/webhooks/transfers"

/** The inbox consumer: receipts are kept per consumer. */
const CONSUMER = "notifications"

/** What the webhook publisher POSTs. */
const Delivery = Schema.fromJsonString(Schema.Struct({
  id: Schema.String,
  topic: Schema.Literal("transfer-completed"),
  payload: Schema.Struct({ transfer: Schema.Number, from: Schema.Number, to: Schema.Number, amount: Schema.Number })
}))

export const ReceiverLive = HttpRouter.use(
  Effect.fn(function*(router) {
    const sql = yield* SqlClient.SqlClient
    const inbox = yield* Inbox.Inbox
    const secret = yield* Config.Redacted("WEBHOOK_SECRET")
    const decode = Schema.decodeUnknownEffect(Delivery)

    const receive = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const body = yield* request.text
      if (!WebhookSignature.verify(secret, request.headers, body)) {
        return HttpServerResponse.text("signature does not verify", { status: 401 })
      }
      const delivery = yield* decode(body)
      const { amount, from, to, transfer } = delivery.payload
      // The receipt and the notifications commit together: a second delivery is a Duplicate.
      const outcome = yield* inbox.handle(
        CONSUMER,
        delivery.id,
        sql`INSERT INTO notifications (account_id, message_id, text) VALUES
              (${from}, ${delivery.id}, ${`sent ${format(amount)} to account ${to} (transfer ${transfer})`}),
              (${to}, ${delivery.id}, ${`received ${format(amount)} from account ${from} (transfer ${transfer})`})`
      )
      return HttpServerResponse.jsonUnsafe({ applied: outcome._tag === "Processed" })
    }).pipe(
      Effect.catchTag(
        "SchemaError",
        () => Effect.succeed(HttpServerResponse.text("not a transfer delivery", { status: 400 }))
      ),
      // Anything else is a 500: the projector retries it later.
      Effect.orDie,
      Effect.withSpan("Notifications.receive")
    )

    yield* router.add("POST", WEBHOOK_PATH, receive)
  })
)
