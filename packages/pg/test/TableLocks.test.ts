// A worker's statements go out as one statement each (settings in a CTE): the lock timeout
// must bound a wait for a TABLE lock too (DDL, LOCK TABLE), which PostgreSQL takes when it
// plans a statement, before any CTE of it runs. Here another session holds the queue table
// in ACCESS EXCLUSIVE mode: every worker operation fails with a retryable lock timeout
// (unbounded, it would wait here until the test's own timeout), and works once the lock is gone.
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "../src/DurableConfig.js"
import * as Inbox from "../src/Inbox.js"
import * as InboxWorker from "../src/InboxWorker.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { substrate } from "./support.js"

/** Runs `body` while another session holds `table` locked ACCESS EXCLUSIVE. */
const whileLocked = <A, E, R>(table: "outbox" | "inbox", body: Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const holder = yield* sql.reserve
    yield* holder.executeUnprepared("BEGIN", [], undefined)
    yield* holder.executeUnprepared(`LOCK TABLE ${settings.table(table)} IN ACCESS EXCLUSIVE MODE`, [], undefined)
    yield* Effect.addFinalizer(() => Effect.ignore(holder.executeUnprepared("ROLLBACK", [], undefined)))
    return yield* body
  }))

const lockTimeout = { _tag: "DatabaseError", code: "55P03", retryable: true }

describe("the lock timeout bounds a wait for a table lock", () => {
  it.layer(substrate({ lockTimeout: "200 millis" }))((it) => {
    it.effect("outbox: claim, mark, renew, give back and release each fail with a retryable lock timeout, then work", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        yield* sql.withTransaction(Effect.forEach([1, 2, 3, 4], (n) => outbox.enqueue("locked-topic", { n })))
        const claimed = yield* worker.claim({ worker: "w", topics: ["locked-topic"], limit: 3, lease: "1 minute" })
        expect(claimed).toHaveLength(3)
        const claims = claimed.map((m) => m.claim)
        const failures = yield* whileLocked(
          "outbox",
          Effect.all([
            Effect.flip(worker.claim({ worker: "w", topics: ["locked-topic"], limit: 3, lease: "1 minute" })),
            Effect.flip(worker.markProjectedMany(claims.slice(0, 1))),
            Effect.flip(worker.renewLeases(claims, "1 minute")),
            Effect.flip(worker.giveBack(claims.slice(1, 2))),
            Effect.flip(worker.markProjected(claims[2]!)),
            Effect.flip(worker.release(claims[2]!, { error: "boom", retryDelay: "1 second" }))
          ])
        )
        for (const failure of failures) expect(failure).toMatchObject(lockTimeout)
        // The lock is gone: the same operations go through.
        expect((yield* worker.markProjectedMany(claims.slice(0, 1))).completed).toEqual([claims[0]!.messageId])
        expect((yield* worker.renewLeases(claims.slice(1), "1 minute")).applied).toHaveLength(2)
        expect((yield* worker.giveBack(claims.slice(1, 2))).applied).toEqual([claims[1]!.messageId])
        yield* worker.markProjected(claims[2]!)
      }))

    it.effect("inbox: claim, complete many, renew and give back each fail with a retryable lock timeout, then work", () =>
      Effect.gen(function*() {
        const inbox = yield* Inbox.Inbox
        const worker = yield* InboxWorker.InboxWorker
        yield* inbox.receive("locked-consumer", "m1", { n: 1 })
        yield* inbox.receive("locked-consumer", "m2", { n: 2 })
        const claimed = yield* worker.claim({ consumer: "locked-consumer", worker: "w", limit: 2, lease: "1 minute" })
        const claims = claimed.map((m) => m.claim)
        const failures = yield* whileLocked(
          "inbox",
          Effect.all([
            Effect.flip(worker.claim({ consumer: "locked-consumer", worker: "w", limit: 2, lease: "1 minute" })),
            Effect.flip(worker.completeMany(claims.slice(0, 1))),
            Effect.flip(worker.renewLeases(claims, "1 minute")),
            Effect.flip(worker.giveBack(claims.slice(1)))
          ])
        )
        for (const failure of failures) expect(failure).toMatchObject(lockTimeout)
        expect((yield* worker.completeMany(claims)).completed).toHaveLength(2)
      }))
  })
})
