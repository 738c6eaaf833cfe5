import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import * as Durable from "../src/Durable.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxWorker from "../src/OutboxWorker.js"

// A trigger records the synchronous_commit each outbox write (a claim's and a renewal's update, a
// mark's delete) ran under, in its transaction.
const recordCommitMode = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.all([
    sql`CREATE TABLE commit_modes (mode text, at timestamptz DEFAULT clock_timestamp())`,
    sql.unsafe(`CREATE FUNCTION record_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO commit_modes (mode) VALUES (current_setting('synchronous_commit')); RETURN NEW; END $$`),
    sql.unsafe(
      `CREATE TRIGGER record_commit_mode AFTER UPDATE OR DELETE ON durable.outbox FOR EACH ROW EXECUTE FUNCTION record_commit_mode()`
    )
  ], { discard: true }))

const cycle = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const outbox = yield* Outbox.Outbox
  const worker = yield* OutboxWorker.OutboxWorker
  const topic = TestSubstrate.freshName("commits")
  yield* outbox.enqueue(topic, {})
  const claimed = yield* worker.claim({ worker: "w", topics: [topic], limit: 10, lease: "1 minute" })
  yield* worker.renewLeases(claimed.map((m) => m.claim), "1 minute")
  const marked = yield* worker.markProjectedMany(claimed.map((m) => m.claim))
  // Inside a caller's transaction the caller's commit is never made asynchronous.
  yield* outbox.enqueue(topic, {})
  yield* sql.withTransaction(worker.claim({ worker: "w", topics: [topic], limit: 10, lease: "1 minute" }))
  const modes = yield* sql<{ mode: string }>`SELECT mode FROM commit_modes ORDER BY at`
  return { marked: marked.completed.length, modes: modes.map((row) => row.mode) }
})

// The test server runs with synchronous_commit off; these sessions turn it back on, so that
// what the worker's statements change is visible.
const substrate = (settings: { readonly synchronousWorkerCommits?: boolean }) =>
  Layer.unwrap(Effect.map(TestDatabase.TestDatabase, (db) => {
    const url = new URL(Redacted.value(db.url))
    url.searchParams.set("options", "-c synchronous_commit=on")
    return Durable.layerOver({ settings, migrate: true }).pipe(
      Layer.provideMerge(
        PgClient.layer({ url: Redacted.make(url.toString()), maxConnections: 4 }).pipe(
          Layer.provide(TestDatabase.liveClock)
        )
      )
    )
  })).pipe(Layer.provideMerge(TestDatabase.layerFresh()))

describe("a worker's commits", () => {
  it.layer(substrate({ synchronousWorkerCommits: false }))((it) => {
    it.effect("with synchronousWorkerCommits off, claim, renew and mark commit without waiting for the WAL; a caller's transaction still waits", () =>
      Effect.gen(function*() {
        yield* recordCommitMode
        expect(yield* cycle).toEqual({ marked: 1, modes: ["off", "off", "off", "on"] })
      }))
  })
  it.layer(substrate({}))((it) => {
    it.effect("by default every commit waits for the WAL flush", () =>
      Effect.gen(function*() {
        yield* recordCommitMode
        expect(yield* cycle).toEqual({ marked: 1, modes: ["on", "on", "on", "on"] })
      }))
  })
})
