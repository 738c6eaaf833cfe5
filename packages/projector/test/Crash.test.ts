import * as Outbox from "@effect-durable/pg/Outbox"
import * as Fixture from "@effect-durable/testing/Fixture"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { fileURLToPath } from "node:url"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import { eventually, projectedCount, substrate, withLayerLive } from "./support.js"

const doomed = fileURLToPath(new URL("./fixtures/doomed-worker.ts", import.meta.url))

describe("a projector process killed mid-delivery", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("loses nothing: after its leases expire another projector delivers the rest, each message marked once", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const db = yield* TestDatabase.TestDatabase
        yield* sql`CREATE TABLE deliveries (message_id text, worker text)`
        yield* sql`CREATE TABLE mark_log (id bigint)`
        yield* sql.unsafe(`CREATE FUNCTION log_mark() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN INSERT INTO mark_log VALUES (NEW.id); RETURN NEW; END $$`)
        yield* sql.unsafe(
          // A mark moves the message into the history: each insert there is one mark.
          `CREATE TRIGGER log_mark AFTER INSERT ON durable.outbox_history FOR EACH ROW EXECUTE FUNCTION log_mark()`
        )
        const ids = yield* outbox.enqueueMany(
          Array.from({ length: 300 }, (_, i) => ({ topic: "crash", payload: { i } }))
        )

        const { child, exited, stderr } = Fixture.spawn(doomed, { CRASH_TEST_DATABASE_URL: Redacted.value(db.url) })

        // Kill it for real while it is busy: some messages delivered, some marked, some in flight.
        yield* eventually(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM deliveries`,
          (rows) => rows[0]!.n >= 60,
          60
        ).pipe(Effect.tapError(() => Effect.sync(() => console.error(stderr()))))
        child.kill("SIGKILL")
        expect(yield* Effect.promise(() => exited)).toBe("SIGKILL")
        expect(yield* projectedCount(ids)).toBeLessThan(ids.length)

        // Another projector takes over once the dead worker's leases expire.
        const survivor = Projector.layer({ topics: ["crash"], workerId: "survivor", pollInterval: "100 millis" }).pipe(
          Layer.provide(
            Publisher.layerHandler((message) =>
              Effect.asVoid(sql`INSERT INTO deliveries (message_id, worker) VALUES (${message.id}, 'survivor')`).pipe(
                Effect.orDie
              )
            )
          )
        )
        yield* withLayerLive(survivor, eventually(projectedCount(ids), (n) => n === ids.length, 60))

        const delivered = yield* sql<{ message_id: string }>`SELECT DISTINCT message_id FROM deliveries`
        expect(delivered.map((row) => row.message_id).sort()).toEqual([...ids].sort())
        const marks = yield* sql<
          { id: string; n: number }
        >`SELECT id::text, count(*)::int AS n FROM mark_log GROUP BY id`
        expect(marks).toHaveLength(ids.length)
        expect(marks.every((mark) => mark.n === 1)).toBe(true)
        // The survivor delivered exactly what it marked; the dead worker marked nothing it had not delivered.
        const [takeover] = yield* sql<{ delivered: number; marked: number }>`
          SELECT (SELECT count(*)::int FROM deliveries WHERE worker = 'survivor') AS delivered,
                 (SELECT count(*)::int FROM durable.outbox_messages WHERE claimed_by = 'survivor' AND projected_at IS NOT NULL) AS marked`
        expect(takeover!.delivered).toBe(takeover!.marked)
        expect(takeover!.marked).toBeGreaterThan(0)
        const markedUndelivered = yield* sql`
          SELECT o.id FROM durable.outbox_messages o
           WHERE o.claimed_by = 'doomed' AND o.projected_at IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = o.id::text AND d.worker = 'doomed')`
        expect(markedUndelivered).toEqual([])
      }))
  })
})
