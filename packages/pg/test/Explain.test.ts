// explainClaim prepares the claim's query with a generic plan. It must leave no prepared
// statement and no session setting behind on any connection, also behind a transaction
// pooler (the CI pass through PgBouncer runs this file), where a statement outside a
// transaction may land on a server connection another client gets next.
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as InboxAdmin from "../src/InboxAdmin.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { substrate } from "./support.js"

interface SessionState {
  readonly mode: string
  readonly prepared: number
}

describe("explainClaim", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("60 concurrent plans next to claims and other sessions' reads: every plan returned, no session sees its setting or statement", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* OutboxAdmin.OutboxAdmin
        const inbox = yield* InboxAdmin.InboxAdmin
        const worker = yield* OutboxWorker.OutboxWorker
        const readSession = sql<SessionState>`
          SELECT current_setting('plan_cache_mode') AS mode,
                 (SELECT count(*)::int FROM pg_prepared_statements WHERE name LIKE 'effect_durable_explain_%') AS prepared`
          .pipe(Effect.map((rows) => rows[0]!))
        const plans = Array.from({ length: 60 }, (_, i) =>
          i % 2 === 0
            ? outbox.explainClaim({
              worker: `w${i}`,
              limit: 10,
              lease: "30 seconds",
              ...(i % 4 === 0 ? { topics: ["orders"] } : {})
            })
            : inbox.explainClaim({ worker: `w${i}`, consumer: "billing", limit: 10, lease: "30 seconds" }))
        const traffic = Array.from(
          { length: 60 },
          (_, i) =>
            i % 3 === 0
              ? Effect.as(worker.claim({ worker: `c${i}`, limit: 5, lease: "30 seconds" }), undefined)
              : readSession
        )
        const results = yield* Effect.all([...plans, ...traffic], { concurrency: 24 })
        for (const plan of results.slice(0, 60)) {
          expect((plan as ReadonlyArray<{ Plan: { "Node Type": string } }>)[0]!.Plan["Node Type"]).toBeTypeOf("string")
        }
        const seen = results.slice(60).filter((r): r is SessionState => r !== undefined)
        expect(seen.length).toBe(40)
        expect(seen.filter((s) => s.mode !== "auto" || s.prepared !== 0)).toEqual([])
        // And afterwards, on every connection the pool hands out.
        const after = yield* Effect.all(Array.from({ length: 24 }, () => readSession), { concurrency: 24 })
        expect(after.filter((s) => s.mode !== "auto" || s.prepared !== 0)).toEqual([])
      }))

    it.effect("a refused limit is an InvalidInput naming it", () =>
      Effect.gen(function*() {
        const outbox = yield* OutboxAdmin.OutboxAdmin
        const error = yield* Effect.flip(outbox.explainClaim({ worker: "w", limit: 0, lease: "30 seconds" }))
        expect(error._tag).toBe("InvalidInput")
        expect(String((error as { message: string }).message)).toContain("limit")
      }))
  })
})
