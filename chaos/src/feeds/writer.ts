/**
 * A writer process of the feed schedule: four transactions at a time, each enqueuing one
 * message on the topic; a third of them stay open 100-2,000 ms after the enqueue (their
 * message commits behind messages with later positions), a tenth roll back on purpose. Every
 * step goes to its journal before and after, synchronously (it survives a SIGKILL). Run by
 * feeds/main.ts as `node dist/feeds/writer.js <config JSON> <run dir>`.
 */
import * as Durable from "@effect-durable/pg/Durable"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { appendFileSync } from "node:fs"
import * as Random from "../random.js"
import { APPLICATION, type JournalLine, READY, TOPIC, type WriterConfig } from "./schema.js"

const config: WriterConfig = JSON.parse(process.argv[2]!)
const random = Random.make(config.seed)
const note = (line: Omit<JournalLine, "at">) =>
  appendFileSync(config.journal, `${JSON.stringify({ ...line, at: performance.timeOrigin + performance.now() })}\n`)

class OnPurpose {}

const write = (uid: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const outbox = yield* Outbox.Outbox
    const delay = random.next() < 0.33 ? random.between(100, 2_000) : 0
    const abort = random.next() < 0.1
    note({ uid, state: "begin", delay })
    const outcome = yield* sql.withTransaction(Effect.gen(function*() {
      yield* outbox.enqueue(TOPIC, { uid })
      if (delay > 0) yield* sql`SELECT pg_sleep(${delay / 1000})`
      if (abort) return yield* Effect.fail(new OnPurpose())
    })).pipe(
      Effect.as("committed" as const),
      Effect.catch((error) => Effect.succeed(error instanceof OnPurpose ? "aborted" as const : "unknown" as const))
    )
    note({ uid, state: outcome, delay })
    // Without an answer (the database restarting): a pause before the next, not a tight loop.
    if (outcome === "unknown") yield* Effect.sleep("200 millis")
  })

Effect.gen(function*() {
  console.log(READY)
  let next = 0
  yield* Effect.forEach(
    [0, 1, 2, 3],
    () =>
      Effect.gen(function*() {
        while (Date.now() < config.until) {
          const uid = `w${config.index}-${process.pid}-${next++}`
          yield* write(uid)
        }
      }),
    { concurrency: "unbounded", discard: true }
  )
}).pipe(
  Effect.provide(Durable.layer({
    connection: { url: Redacted.make(config.url), applicationName: APPLICATION.writer(config.index), poolSize: 6 }
  })),
  Effect.tapCause((cause) => Effect.logError(`chaos feed writer ${config.index} failed`, cause)),
  NodeRuntime.runMain
)
