// README "HTTP idempotency": an HttpApi whose POST /payments is safe to retry.
import * as Idempotency from "@effect-durable/http/Idempotency"
import * as Subject from "@effect-durable/http/Subject"
import * as Durable from "@effect-durable/pg/Durable"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Effect from "effect/Effect"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as HttpRouter from "effect/http/HttpRouter"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { createServer } from "node:http"

const Payment = Schema.Struct({ id: Schema.Number, amount: Schema.Number })

export class PaymentsApi extends HttpApi.make("payments").add(
  HttpApiGroup.make("payments")
    .add(
      HttpApiEndpoint.post("create", "/payments", {
        payload: Schema.Struct({ amount: Schema.Int.check(Schema.isGreaterThan(0)) }),
        success: Payment.pipe(HttpApiSchema.status(201))
      })
        // The Idempotency-Key header is required here (and documented in the OpenAPI document).
        .pipe(Idempotency.endpoint({ required: true }))
    )
    // Who the request is for: a replay is only ever served to the subject that made the
    // request. Added after the endpoints, it wraps their idempotency middleware.
    .middleware(Subject.Identify)
) {}

// Your table: payments (id serial PRIMARY KEY, amount int NOT NULL).
const PaymentsLive = HttpApiBuilder.group(PaymentsApi, "payments", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const outbox = yield* Outbox.Outbox
    return handlers.handle("create", ({ payload }) =>
      // Runs inside the ledger's transaction: the row, the message and the stored response
      // commit together.
      Effect.gen(function*() {
        const [row] = yield* sql<{ id: number }>`INSERT INTO payments (amount) VALUES (${payload.amount}) RETURNING id`
        yield* outbox.enqueue("payment-created", { id: row!.id, amount: payload.amount })
        return { id: row!.id, amount: payload.amount }
      }).pipe(Effect.orDie))
  }))

// Put your authentication here; with a security middleware of your own, provide `Subject`
// from it instead (`provides: Subject`), and the middleware runs after it.
const IdentifyLive = Subject.layerIdentify((request) =>
  Effect.succeed(Option.fromNullishOr(request.headers["x-tenant"]))
)

export const PaymentsRoutes = HttpApiBuilder.layer(PaymentsApi, { openapiPath: "/openapi.json" }).pipe(
  Layer.provide(PaymentsLive),
  Layer.provide([Idempotency.layer(PaymentsApi), IdentifyLive])
)

// The server on DATABASE_URL: `Layer.launch(Main).pipe(NodeRuntime.runMain)`. The key's
// header is redacted in the server's own spans.
export const Main = HttpRouter.serve(PaymentsRoutes).pipe(
  Layer.provide(Idempotency.layerRedactKeyHeader()),
  Layer.provide(NodeHttpServer.layer(createServer, { port: 3000 })),
  Layer.provide(Durable.layerConfig({ migrate: true }))
)
