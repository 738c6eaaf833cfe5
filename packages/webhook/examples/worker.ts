// README "Deploying": the projector in a process of its own. Configuration from the
// environment (DATABASE_URL, PROJECTOR_*, WEBHOOK_URL, WEBHOOK_SECRET); SIGTERM lets
// in-flight deliveries finish (up to PROJECTOR_SHUTDOWN_DEADLINE) and gives back the rest.
//   node dist/worker.js        (or: node --import tsx examples/worker.ts)
import * as Durable from "@effect-durable/pg/Durable"
import * as Projector from "@effect-durable/projector/Projector"
import * as WebhookPublisher from "@effect-durable/webhook/WebhookPublisher"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import * as Layer from "effect/Layer"

const Deliver = Layer.unwrap(
  Effect.map(
    Config.all({ url: Config.String("WEBHOOK_URL"), secret: Config.Redacted("WEBHOOK_SECRET") }),
    (webhook) => WebhookPublisher.layer(webhook).pipe(Layer.provide(FetchHttpClient.layer))
  )
)

// Migrations run as a deploy step (`effect-durable migrate`); this process only checks the
// schema's version at start and refuses to run against one it does not know.
export const Worker = Projector.layerConfig().pipe(
  Layer.provide(Deliver),
  Layer.provide(Durable.layerConfig())
)

if (import.meta.url === `file://${process.argv[1]}`) {
  Layer.launch(Worker).pipe(NodeRuntime.runMain)
}
