/**
 * A consumer process of the feed schedule: `Feed.run` of its consumer, applying each batch by
 * inserting its messages into `chaos_feed.applied` in the transaction that advances the
 * cursor. SIGTERM or SIGKILL ends it wherever it is. Run by feeds/main.ts as
 * `node dist/feeds/consumer.js <config JSON> <run dir>`.
 */
import * as Durable from "@effect-durable/pg/Durable"
import * as Feed from "@effect-durable/pg/Feed"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { APPLICATION, type ConsumerConfig, READY } from "./schema.js"

const config: ConsumerConfig = JSON.parse(process.argv[2]!)

Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const feed = yield* Feed.Feed
  console.log(READY)
  return yield* feed.run(
    config.consumer,
    (entries) =>
      sql`INSERT INTO chaos_feed.applied (consumer, message_id, uid, position, process)
        SELECT ${config.consumer}, unnest(${entries.map((e) => e.id)}::bigint[]),
               unnest(${entries.map((e) => (e.payload as { uid: string }).uid)}::text[]),
               unnest(${entries.map((e) => e.position)}::bigint[]), ${config.process}`,
    { limit: 25, idle: "50 millis", maxBackoff: "1 second" }
  )
}).pipe(
  Effect.provide(Durable.layer({
    connection: { url: Redacted.make(config.url), applicationName: APPLICATION.consumer(config.index), poolSize: 4 }
  })),
  Effect.tapCause((cause) => Effect.logError(`chaos feed consumer ${config.process} failed`, cause)),
  NodeRuntime.runMain
)
