/**
 * A relay process of the feed schedule: `Relay` on the schedule's slot, publishing the topic
 * into JetStream (`Nats-Msg-Id`: the message id). Two run at once; one publishes at a time.
 * SIGKILL ends it wherever it is: between a publish and its settling, or mid-step. Run by
 * feeds/main.ts as `node dist/feeds/relay.js <config JSON> <run dir>`.
 */
import * as JetStreamPublisher from "@effect-durable/nats/JetStreamPublisher"
import * as Nats from "@effect-durable/nats/Nats"
import * as Durable from "@effect-durable/pg/Durable"
import * as Relay from "@effect-durable/projector/Relay"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { APPLICATION, READY, type RelayConfig, SLOT, TOPIC } from "./schema.js"

const config: RelayConfig = JSON.parse(process.argv[2]!)

console.log(READY)
Layer.launch(
  Relay.layer({ slot: SLOT, topics: [TOPIC], idle: "50 millis", maxBackoff: "1 second" }).pipe(
    Layer.provide(JetStreamPublisher.layer({ ackTimeout: "2 seconds" })),
    Layer.provide(Nats.layer({ servers: config.nats })),
    Layer.provide(Durable.layer({
      connection: { url: Redacted.make(config.url), applicationName: APPLICATION.relay(config.index), poolSize: 4 }
    }))
  )
).pipe(
  Effect.tapCause((cause) => Effect.logError(`chaos feed relay ${config.index} failed`, cause)),
  NodeRuntime.runMain
)
