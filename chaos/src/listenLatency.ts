/**
 * `npm run latency --workspace @effect-durable/chaos [-- --messages=N]`: commit-to-handler
 * latency of one projector in three set-ups, on an embedded PostgreSQL of its own and
 * PgBouncer (transaction mode) in front of it:
 *   direct        the pool and the LISTEN connection straight to PostgreSQL;
 *   pooled        the pool through PgBouncer, no `listenUrl`: the LISTEN goes through the
 *                 pooler too and is lost there, so the projector finds work by polling;
 *   pooled+listen the pool through PgBouncer, `listenUrl` straight to PostgreSQL.
 * Messages are committed one at a time, 20 to 120 ms apart (the next one after the previous
 * was delivered), so each measures a wake-up, not a queue. Prints p50, p99 and max per set-up.
 */
import * as Durable from "@effect-durable/pg/Durable"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as PgServer from "@effect-durable/testing/PgServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { chmodSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Children from "./children.js"
import * as Pooler from "./pooler.js"

const argument = process.argv.slice(2).find((arg) => arg.startsWith("--messages="))
const MESSAGES = argument === undefined ? 200 : Number(argument.slice("--messages=".length))
if (!Number.isInteger(MESSAGES) || MESSAGES < 10 || MESSAGES > 100_000) {
  console.error("usage: latency [--messages=N] (10 to 100000, default 200)")
  process.exit(2)
}

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

/** Commits MESSAGES messages one by one and returns each commit-to-handler time, in ms. */
const measure = (name: string, poolUrl: string, listenUrl: string | undefined) =>
  Effect.scoped(Effect.gen(function*() {
    const topic = `latency-${name}`
    let arrived: Deferred.Deferred<number> | undefined
    const publisher = Publisher.layerHandler(() =>
      Effect.suspend(() => arrived === undefined ? Effect.void : Deferred.succeed(arrived, performance.now()))
    )
    const context = yield* Layer.build(
      Projector.layer({ topics: [topic], ...(listenUrl === undefined ? {} : { listenUrl: Redacted.make(listenUrl) }) })
        .pipe(
          Layer.provide(publisher),
          Layer.provideMerge(Durable.layerOver({})),
          Layer.provideMerge(PgClient.layer({
            url: Redacted.make(poolUrl),
            applicationName: `latency-${name}`,
            maxConnections: 8,
            // Behind PgBouncer (transaction mode) named prepared statements cannot be kept.
            prepare: name === "direct"
          }))
        )
    )
    const sql = Context.get(context, SqlClient.SqlClient)
    const producer = Context.get(context, Outbox.Outbox)
    // Let the listener connect before the first measurement.
    yield* Effect.sleep("1 second")
    const times: Array<number> = []
    for (let i = 0; i < MESSAGES; i++) {
      arrived = yield* Deferred.make<number>()
      const committedAt = yield* Effect.map(
        sql.withTransaction(producer.enqueue(topic, { i })),
        () => performance.now()
      )
      const deliveredAt = yield* Deferred.await(arrived)
      times.push(deliveredAt - committedAt)
      yield* Effect.sleep(`${20 + Math.floor(Math.random() * 100)} millis`)
    }
    const sorted = [...times].sort((a, b) => a - b)
    const line = `${name.padEnd(14)} p50 ${percentile(sorted, 50).toFixed(1).padStart(7)} ms   p99 ${
      percentile(sorted, 99).toFixed(1).padStart(7)
    } ms   max ${sorted[sorted.length - 1]!.toFixed(1).padStart(7)} ms`
    console.log(line)
  }))

const main = Effect.gen(function*() {
  const server = yield* PgServer.PgServer
  const run = yield* Effect.acquireRelease(
    Effect.sync(() => {
      const path = mkdtempSync(join(tmpdir(), "effect-durable-latency-"))
      // PgBouncer runs as its own OS user and keeps its files in here.
      chmodSync(path, 0o711)
      return Children.guard(path)
    }),
    (run) => Effect.sync(() => run.dispose(false))
  )
  const direct = Redacted.value(server.url())
  // Migrated once, directly (DDL does not need the pooler).
  yield* Layer.build(
    Durable.layerOver({ migrate: true }).pipe(
      Layer.provide(PgClient.layer({ url: Redacted.make(direct), maxConnections: 2 }))
    )
  )
  const pooler = yield* Effect.acquireRelease(
    Effect.promise(() => Pooler.start(run, direct)),
    (pooler) => Effect.promise(() => pooler.stop().catch(() => undefined))
  )
  console.log(`commit to handler, ${MESSAGES} messages each, one at a time (projector defaults: poll interval 1 s)`)
  yield* measure("direct", direct, undefined)
  yield* measure("pooled", pooler.url, undefined)
  yield* measure("pooled+listen", pooler.url, direct)
}).pipe(
  Effect.scoped,
  Effect.provide(PgServer.layerEmbedded({}))
)

NodeRuntime.runMain(main)
