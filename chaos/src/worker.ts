/**
 * A projector process: `Projector.layer` delivering to a handler that records every delivery
 * in a transaction of its own (so redeliveries are counted) and applies the message's effect
 * once through `Inbox.handle` (with `--batch`, a batch handler: `Options.batch`). Between the
 * two it waits 50-450 ms, as a call to another service would: deliveries overlap, so a fault lands mid-delivery, and a kill can fall between a
 * recorded delivery and its effect. It never fails on purpose: any failure it reports comes
 * from a fault. SIGTERM closes the projector's scope (in-flight deliveries finish or are released).
 *
 * Run by main.ts as `node dist/worker.js <config JSON> <run dir>`.
 */
import * as Inbox from "@effect-durable/pg/Inbox"
import type { OutboxMessage } from "@effect-durable/pg/OutboxWorker"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { BATCH } from "./options.js"
import { CONSUMER, type Payload, READY, TOPIC } from "./schema.js"
import { type WorkerConfig, workerSubstrate } from "./substrate.js"

const config: WorkerConfig = JSON.parse(process.argv[2]!)
const substrate = workerSubstrate(config)

const handler = Layer.unwrap(Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const inbox = yield* Inbox.Inbox
  const apply = (message: OutboxMessage) =>
    inbox.handle(
      CONSUMER,
      message.id,
      sql`INSERT INTO chaos.effects (message_id, uid, worker) VALUES (${message.id}::bigint, ${
        (message.payload as Payload).uid
      }, ${config.workerId})`
    )
  if (config.batch === true) {
    // One recorded delivery statement and one pause per call; each effect applied on its own,
    // and a message whose effect failed (a fault) reported failed alone.
    return Publisher.layerBatchHandler(BATCH, (messages) =>
      Effect.gen(function*() {
        yield* sql`INSERT INTO chaos.deliveries (message_id, uid, worker, attempt)
                   SELECT m, u, ${config.workerId}, a
                     FROM unnest(${messages.map((m) => m.id)}::bigint[], ${
          messages.map((m) => (m.payload as Payload).uid)
        }::text[], ${messages.map((m) => m.attempt)}::int[]) WITH ORDINALITY AS t(m, u, a, n)
                    ORDER BY n`
        yield* Effect.sleep(Duration.millis(50 + Math.random() * 400))
        const failures: Array<readonly [OutboxMessage, Publisher.PublishError]> = []
        for (const message of messages) {
          const applied = yield* Effect.result(apply(message))
          if (applied._tag === "Failure") {
            failures.push([message, Publisher.retryable(`chaos handler: ${applied.failure.message}`)])
          }
        }
        return Publisher.failedIn(failures)
      }).pipe(Effect.mapError((error) => Publisher.retryable(`chaos handler: ${error.message}`))))
  }
  return Publisher.layerHandler((message) => {
    const { uid } = message.payload as Payload
    return Effect.gen(function*() {
      yield* sql`INSERT INTO chaos.deliveries (message_id, uid, worker, attempt)
                 VALUES (${message.id}::bigint, ${uid}, ${config.workerId}, ${message.attempt})`
      yield* Effect.sleep(Duration.millis(50 + Math.random() * 400))
      yield* apply(message)
    }).pipe(Effect.mapError((error) => Publisher.retryable(`chaos handler: ${error.message}`)))
  })
}))

const projector = Projector.layer({
  topics: [TOPIC],
  workerId: config.workerId,
  ...(config.leaseMillis === undefined ? {} : { lease: config.leaseMillis }),
  // Handler failures come only from faults (a restart, a terminated backend); a short backoff
  // ceiling keeps the run bounded. The backoff is not what this suite tests.
  backoff: { min: "500 millis", max: "5 seconds" },
  // Behind a pooler the pool cannot carry LISTEN: the wake-ups come over a direct connection.
  ...(config.listenUrl === undefined ? {} : { listenUrl: Redacted.make(config.listenUrl) })
}).pipe(Layer.provide(handler))

Effect.scoped(Effect.gen(function*() {
  yield* Layer.build(projector)
  console.log(READY)
  return yield* Effect.never
})).pipe(
  Effect.provide(substrate),
  Effect.tapCause((cause) => Effect.logError(`chaos worker ${config.workerId} failed`, cause)),
  NodeRuntime.runMain
)
