// Retention: a record replays until it is purged (the published retention is a minimum,
// 24 hours); after the purge its key is new. Purge never waits for, nor touches, a request
// in flight, and refuses bad arguments before deleting anything.
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import { eventually } from "@effect-durable/testing/Eventually"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as SqlClient from "effect/sql/SqlClient"
import { executions, freshAccount, gate, recordsOf, send, server } from "./support.js"

const TRANSFER = "POST /v1/accounts/:account/transfers"

describe("retention", () => {
  it.layer(server(), { timeout: "2 minutes" })((it) => {
    it.effect("a record older than the retention replays until purged; after the purge the key runs again, unmarked", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        const account = freshAccount()
        const call = { body: `{"amount":1}`, key: "aged", user: "alice" }
        const path = `/v1/accounts/${account}/transfers`
        expect((yield* send(path, call)).status).toBe(201)
        yield* sql`UPDATE durable.mutation_records SET created_at = now() - interval '25 hours'
                    WHERE operation = ${TRANSFER} AND key = 'aged'`
        expect((yield* send(path, call)).headers["idempotent-replayed"]).toBe("true")
        expect(yield* ledger.purge({ olderThan: "24 hours" })).toBeGreaterThanOrEqual(1)
        expect(yield* recordsOf(TRANSFER, "aged")).toBe(0)
        const again = yield* send(path, call)
        expect([again.status, again.headers["idempotent-replayed"]]).toEqual([201, undefined])
        expect(executions(account)).toBe(2)
      }))

    it.effect("a purge during a request in flight neither waits for it nor touches it; bad arguments delete nothing", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        const account = freshAccount()
        const held = yield* gate(account)
        const path = `/v1/accounts/${account}/transfers`
        const inFlight = yield* Effect.forkChild(send(path, { body: `{"amount":1}`, key: "flying", user: "alice" }))
        yield* eventually(Effect.sync(() => executions(account)), (n) => n === 1)
        expect(yield* ledger.purge({ olderThan: "1 hour" })).toBe(0)
        const [before] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.mutation_records`
        const refusals: ReadonlyArray<MutationLedger.PurgeOptions> = [
          { olderThan: "30 minutes" },
          { olderThan: "-24 hours" as MutationLedger.PurgeOptions["olderThan"] },
          { olderThan: Number.NaN },
          { olderThan: "24 hours", batchSize: 0 }
        ]
        for (const options of refusals) {
          const refused = yield* Effect.flip(ledger.purge(options))
          expect(refused._tag).toBe("InvalidInput")
        }
        const [after] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.mutation_records`
        expect(after!.n).toBe(before!.n)
        yield* Deferred.succeed(held, undefined)
        expect((yield* Fiber.join(inFlight)).status).toBe(201)
        expect(yield* recordsOf(TRANSFER, "flying")).toBe(1)
      }))
  })
})
