/**
 * `npm start`: a small bank as an HTTP service on effect-durable.
 *
 * - Database.ts      PostgreSQL (DATABASE_URL, or the development database), the substrate, the tables
 * - Api.ts           the HttpApi: accounts, transfers (OpenAPI at /openapi.json, Swagger UI at /docs)
 * - Authentication   who is calling (demo bearer tokens), for the API and for idempotency
 * - Accounts.ts      open (idempotent), ETag / If-Match through CAS, entries paged by signed cursors
 * - Transfers.ts     POST /transfers: rows + an outbox message in the idempotency transaction
 * - Notifications.ts the webhook receiver: each delivery applied once through the inbox
 * - Delivery.ts      the projector fiber: outbox -> signed webhook
 * - Retention.ts     idempotency records kept 24 hours, then purged
 * - Server.ts        HTTP on 127.0.0.1, draining keep-alive connections on shutdown
 * - Demo.ts          `npm start -- --demo`: the scripted story, then exit
 *
 * It serves until Ctrl-C or SIGTERM and then shuts down in order: the projector stops, the
 * server finishes what is in flight, the pool closes, the development database stops.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Cause from "effect/Cause"
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import { parseArgs } from "node:util"
import { ConfigLive, DatabaseLive } from "./Database.js"
import { DeliveryLive } from "./Delivery.js"
import * as Demo from "./Demo.js"
import { baseUrl, InstructionsLive } from "./Instructions.js"
import { RetentionLive } from "./Retention.js"
import { ServerLive } from "./Server.js"

const { values } = parseArgs({ options: { demo: { type: "boolean", default: false } } })

/** PORT when it is set; otherwise 3000, or any free port when 3000 is taken (the demo: any free port). */
const Server = Layer.unwrap(
  Effect.map(Config.option(Config.Port("PORT")), (port) =>
    values.demo
      ? ServerLive({ port: 0, fallback: false })
      : Option.match(port, {
        onNone: () => ServerLive({ port: 3000, fallback: true }),
        onSome: (port) => ServerLive({ port, fallback: false })
      }))
)

const App = Layer.mergeAll(DeliveryLive, RetentionLive).pipe(
  Layer.provideMerge(Server),
  Layer.provideMerge(DatabaseLive),
  Layer.provide(ConfigLive)
)

/** Ctrl-C and SIGTERM are how the service is stopped: an exit by that interruption alone is exit code 0. */
const teardown: Runtime.Teardown = (exit, onExit) =>
  Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) ? onExit(0) : Runtime.defaultTeardown(exit, onExit)

if (values.demo) {
  Effect.flatMap(baseUrl, Demo.run).pipe(Effect.provide(App), NodeRuntime.runMain({ teardown }))
} else {
  Layer.launch(InstructionsLive.pipe(Layer.provide(App))).pipe(NodeRuntime.runMain({ teardown }))
}
