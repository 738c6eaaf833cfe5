// The consumer test's type check: an application's TypeScript (strict, NodeNext) sees the
// packages' declarations, with skipLibCheck off so every .d.ts they ship is checked too.
import * as AdminPage from "@effect-durable/cli/AdminPage"
import * as Cursor from "@effect-durable/core/Cursor"
import * as DevDatabase from "@effect-durable/embedded/DevDatabase"
import * as Idempotency from "@effect-durable/http/Idempotency"
import * as Subject from "@effect-durable/http/Subject"
import * as JetStreamPublisher from "@effect-durable/nats/JetStreamPublisher"
import * as Durable from "@effect-durable/pg/Durable"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as Effect from "effect/Effect"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"

export const database: Layer.Layer<Durable.Services, unknown> = Durable.layerConfig({ migrate: true }).pipe(
  Layer.provide(DevDatabase.layerDatabaseUrl())
)
export const projector = Projector.layer({ topics: ["order-placed"] }).pipe(
  Layer.provide(Publisher.layerHandler(() => Effect.void))
)
export const nats = JetStreamPublisher.layer
export const accepted = MutationLedger.accept({ ok: true })
export const codec = Cursor.layerConfig
export const tests = TestDatabase.layerFresh
export const page = AdminPage.layer({ mount: "/admin/durable" })
class Api extends HttpApi.make("api").add(
  HttpApiGroup.make("orders")
    .add(HttpApiEndpoint.post("place", "/orders").pipe(Idempotency.endpoint({ required: true })))
    .middleware(Subject.Identify)
) {}
export const idempotency = Layer.mergeAll(
  Idempotency.layer(Api),
  Subject.layerIdentify(() => Effect.succeed(Option.some("tenant")))
)
