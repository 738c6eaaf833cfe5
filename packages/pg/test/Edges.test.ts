// The substrate at its edges: arguments that can destroy data, the caller's transaction left
// as it was, NUL characters, deep and huge JSON, durations that are not durations, errors
// the caller's own statements raise, and spans that must not carry request data.
import type * as Errors from "@effect-durable/core/Errors"
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as Telemetry from "@effect-durable/testing/Telemetry"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as SqlClient from "effect/sql/SqlClient"
import * as Cas from "../src/Cas.js"
import * as Inbox from "../src/Inbox.js"
import * as InboxAdmin from "../src/InboxAdmin.js"
import * as InboxWorker from "../src/InboxWorker.js"
import * as MutationLedger from "../src/MutationLedger.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxWorker from "../src/OutboxWorker.js"

// Statement timeout of the substrate: short, so that leaking it would cancel the caller.
const Live = TestSubstrate.layer({ settings: { lockTimeout: "2 seconds", statementTimeout: "150 millis" } })

const request = (body: unknown = { n: 1 }) =>
  Effect.map(
    Fingerprint.fingerprint(body),
    (fingerprint) => ({ kind: "k", eligibility: new Uint8Array(), fingerprint })
  )

const settingsNow = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql<
      { lock: string; statement: string }
    >`SELECT current_setting('lock_timeout') AS lock, current_setting('statement_timeout') AS statement`,
    (rows) => rows[0]!
  ))

describe("the substrate at its edges", () => {
  it.layer(Live, { timeout: "2 minutes" })((it) => {
    it.effect("a topic named after a property every object has (valueOf, constructor, __proto__) is a topic like any other", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const topics = ["valueOf", "constructor", "__proto__", "toString", "hasOwnProperty"]
        const ids = yield* Effect.forEach(topics, (topic) => outbox.enqueue(topic, { topic }))
        const claimed = yield* worker.claim({ worker: "w", topics, limit: 10, lease: "1 minute" })
        expect(claimed.map((m) => m.id).sort()).toEqual([...ids].sort())
        expect(claimed.map((m) => m.topic).sort()).toEqual([...topics].sort())
        yield* worker.markProjectedMany(claimed.map((m) => m.claim))
      }))

    it.effect("purge refuses zero, negative, NaN, garbage and sub-floor retentions, typed, and deletes nothing", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        const outbox = yield* OutboxAdmin.OutboxAdmin
        const inbox = yield* InboxAdmin.InboxAdmin
        yield* ledger.execute(
          { subject: "purge-edge", operation: "op", key: "k" },
          yield* request(),
          Effect.succeed(MutationLedger.accept(1))
        )
        yield* sql`UPDATE durable.mutation_records SET created_at = now() - interval '30 days' WHERE subject = 'purge-edge'`
        const refused = [0, -1, Number.NaN, "-5 days", "garbage", Infinity, 1e300, "0 seconds"] as const
        for (
          const [purge, belowFloor] of [[ledger.purge, "59 minutes"], [inbox.purge, "59 minutes"], [
            outbox.purge,
            "59 seconds"
          ]] as const
        ) {
          for (const olderThan of [...refused, belowFloor]) {
            const error = yield* Effect.flip(purge({ olderThan: olderThan as never }))
            expect(error).toMatchObject({ _tag: "InvalidInput", argument: "olderThan" })
          }
        }
        expect(yield* sql`SELECT 1 FROM durable.mutation_records WHERE subject = 'purge-edge'`).toHaveLength(1)
        // The documented floors: 1 hour for the ledger and the inbox, 1 minute for the outbox.
        expect(MutationLedger.PURGE_FLOOR).toBe("1 hour")
        expect(InboxAdmin.PURGE_FLOOR).toBe("1 hour")
        expect(OutboxAdmin.PURGE_FLOOR).toBe("1 minute")
        expect(yield* ledger.purge({ olderThan: "1 hour" })).toBeGreaterThanOrEqual(1)
      }))

    it.effect("inside a caller's transaction every operation leaves lock_timeout and statement_timeout as it found them", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const admin = yield* OutboxAdmin.OutboxAdmin
        const inbox = yield* Inbox.Inbox
        const inboxWorker = yield* InboxWorker.InboxWorker
        const cas = yield* Cas.Cas
        yield* sql`CREATE TABLE edge_docs (id bigint PRIMARY KEY, body text, revision bigint NOT NULL DEFAULT 1)`
        yield* sql`INSERT INTO edge_docs (id, body) VALUES (1, 'a')`
        const topic = TestSubstrate.freshName("edge")
        const seen: Array<[string, { lock: string; statement: string }]> = []
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`SET LOCAL lock_timeout = '17s'`
          yield* sql`SET LOCAL statement_timeout = '23s'`
          const check = (name: string) =>
            Effect.flatMap(settingsNow, (now) => Effect.sync(() => void seen.push([name, now])))
          const identity = { subject: "tx-edge", operation: "op", key: "k1" }
          yield* ledger.execute(identity, yield* request(), Effect.succeed(MutationLedger.accept(1)))
          yield* check("ledger first")
          yield* ledger.execute(identity, yield* request(), Effect.die("must not run"))
          yield* check("ledger replay")
          yield* Effect.flip(ledger.execute(identity, yield* request({ n: 2 }), Effect.die("must not run")))
          yield* check("ledger conflict")
          const id = yield* outbox.enqueue(topic, {})
          yield* check("enqueue")
          const [claimed] = yield* worker.claim({ worker: "w", topics: [topic], limit: 1, lease: "1 minute" })
          yield* check("claim")
          yield* worker.renewLease(claimed!.claim, "2 minutes")
          yield* check("renewLease")
          yield* worker.renewLeases([claimed!.claim], "2 minutes")
          yield* check("renewLeases")
          yield* worker.release(claimed!.claim, { error: "x", retryDelay: 0 })
          yield* check("release")
          const [again] = yield* worker.claim({ worker: "w", topics: [topic], limit: 1, lease: "1 minute" })
          yield* worker.giveBack([again!.claim])
          yield* check("giveBack")
          const [third] = yield* worker.claim({ worker: "w", topics: [topic], limit: 1, lease: "1 minute" })
          yield* worker.markProjectedMany([third!.claim])
          yield* check("markProjectedMany")
          yield* admin.replay([id])
          yield* check("replay")
          yield* inbox.handle("tx-consumer", "m1", Effect.void)
          yield* check("inbox handle")
          yield* inbox.receive("tx-consumer", "m2", { a: 1 })
          const [entry] = yield* inboxWorker.claim({
            consumer: "tx-consumer",
            worker: "w",
            limit: 1,
            lease: "1 minute"
          })
          yield* inboxWorker.complete(entry!.claim)
          yield* check("inbox complete")
          yield* cas.update({ table: "edge_docs", id: 1, expectedRevision: 1, set: { body: "b" } })
          yield* check("cas")
          yield* Effect.flip(cas.update({ table: "edge_docs", id: 1, expectedRevision: 1, set: { body: "c" } }))
          yield* check("cas conflict")
          // A caller statement longer than the substrate's statement timeout runs to its end.
          yield* sql`SELECT pg_sleep(0.4)`
          yield* check("caller's own statement")
        }))
        for (const [name, now] of seen) expect([name, now]).toEqual([name, { lock: "17s", statement: "23s" }])
        expect(seen.length).toBe(16)
      }))

    it.effect("a NUL anywhere in a JSON value or a text argument is refused before any SQL, and the caller's transaction stays usable", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const inbox = yield* Inbox.Inbox
        const cas = yield* Cas.Cas
        const topic = TestSubstrate.freshName("nul")
        const refusals = yield* sql.withTransaction(Effect.gen(function*() {
          const failures: Array<Errors.InvalidInput | Errors.UnsupportedJsonValue | unknown> = [
            yield* Effect.flip(outbox.enqueue(topic, { note: "a\u0000b" })),
            yield* Effect.flip(outbox.enqueue(topic, {}, { headers: { tenant: "x\u0000" } })),
            yield* Effect.flip(outbox.enqueue("t\u0000", {})),
            yield* Effect.flip(ledger.execute(
              { subject: "s", operation: "op", key: "nul" },
              yield* request(),
              Effect.succeed(MutationLedger.accept({ text: "\u0000" }))
            )),
            yield* Effect.flip(
              ledger.execute({ subject: "s\u0000", operation: "op", key: "k" }, yield* request(), Effect.die("never"))
            ),
            yield* Effect.flip(inbox.receive("c", "m-nul", ["\u0000"])),
            yield* Effect.flip(worker.claim({ worker: "w\u0000", limit: 1, lease: "1 minute" })),
            yield* Effect.flip(cas.update({ table: "edge_docs", id: 1, expectedRevision: 1, set: { body: "\u0000" } }))
          ]
          // The transaction is still usable: a statement after the refusals succeeds.
          const [{ one }] = (yield* sql<{ one: number }>`SELECT 1 AS one`) as [{ one: number }]
          expect(one).toBe(1)
          return failures
        }))
        expect(refusals.map((e) => (e as { _tag: string })._tag)).toEqual([
          "UnsupportedJsonValue",
          "InvalidInput",
          "InvalidInput",
          "UnsupportedJsonValue",
          "InvalidInput",
          "UnsupportedJsonValue",
          "InvalidInput",
          "InvalidInput"
        ])
        expect(refusals[0]).toMatchObject({ path: "$.note" })
        expect(refusals[1]).toMatchObject({ argument: "headers.tenant" })
        expect(refusals[4]).toMatchObject({ argument: "identity.subject" })
        expect(refusals[7]).toMatchObject({ argument: "set.body" })
        expect(yield* sql`SELECT 1 FROM durable.outbox_messages WHERE topic = ${topic}`).toEqual([])
        expect(yield* sql`SELECT 1 FROM durable.mutation_records WHERE key = 'nul'`).toEqual([])
      }))

    it.effect("JSON nested 20,000 deep is a typed refusal, never a stack overflow, in enqueue and in a ledger response", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const ledger = yield* MutationLedger.MutationLedger
        let deep: unknown = 0
        for (let i = 0; i < 20_000; i++) deep = { d: deep }
        expect(yield* Effect.flip(outbox.enqueue("deep", deep))).toMatchObject({
          _tag: "UnsupportedJsonValue",
          reason: `nested deeper than ${Fingerprint.MAX_DEPTH} levels`
        })
        const error = yield* Effect.flip(
          ledger.execute(
            { subject: "s", operation: "deep", key: "k" },
            yield* request(),
            Effect.succeed(MutationLedger.accept(deep))
          )
        )
        expect(error).toMatchObject({ _tag: "UnsupportedJsonValue" })
      }))

    it.effect("durations that are not durations are typed refusals: NaN, negative, garbage and out of range", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const topic = TestSubstrate.freshName("durations")
        const id = yield* outbox.enqueue(topic, {})
        const [claimed] = yield* worker.claim({ worker: "w", topics: [topic], limit: 1, lease: "1 minute" })
        for (const bad of [Number.NaN, -1, "-5 seconds", "soon", 1e300, Infinity] as const) {
          expect(yield* Effect.flip(outbox.enqueue(topic, {}, { delay: bad as never }))).toMatchObject({
            argument: "delay"
          })
          expect(yield* Effect.flip(worker.release(claimed!.claim, { error: "e", retryDelay: bad as never })))
            .toMatchObject({
              argument: "retryDelay"
            })
          expect(yield* Effect.flip(worker.renewLease(claimed!.claim, bad as never))).toMatchObject({
            argument: "lease"
          })
          expect(yield* Effect.flip(worker.claim({ worker: "w", limit: 1, lease: bad as never }))).toMatchObject({
            argument: "lease"
          })
        }
        // Nothing was released or renewed by the refusals.
        expect((yield* worker.release(claimed!.claim, { error: "e", retryDelay: 0 })).dead).toBe(false)
        expect(id).toBe(claimed!.id)
      }))

    it.effect("a timeout raised by the caller's own statement inside decide is a retryable DatabaseError keeping the driver's error", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        yield* sql`CREATE TABLE edge_locked (id int PRIMARY KEY)`
        yield* sql`INSERT INTO edge_locked VALUES (1)`
        // Another session holds the row: decide's own update waits until the substrate's
        // statement timeout (150 ms here) cancels it.
        const error = yield* Effect.flip(Effect.scoped(Effect.gen(function*() {
          const holder = yield* sql.reserve
          yield* holder.executeUnprepared("BEGIN", [], undefined)
          yield* holder.executeUnprepared("SELECT * FROM edge_locked FOR UPDATE", [], undefined)
          yield* Effect.addFinalizer(() => Effect.ignore(holder.executeUnprepared("ROLLBACK", [], undefined)))
          return yield* ledger.execute(
            { subject: "s", operation: "locked", key: "k" },
            yield* request(),
            Effect.as(sql`UPDATE edge_locked SET id = 1 WHERE id = 1`, MutationLedger.accept(1))
          )
        })))
        expect(error).toMatchObject({
          _tag: "DatabaseError",
          code: "57014",
          retryable: true,
          operation: "MutationLedger.execute"
        })
        expect((error as { cause?: { code?: string } }).cause?.code).toBe("57014")
        expect(yield* sql`SELECT 1 FROM durable.mutation_records WHERE operation = 'locked'`).toEqual([])
      }))

    it.effect("a transaction whose connection dies inside it fails typed and retryable, never as a defect (its ROLLBACK fails too)", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        // decide's own statement kills its session: the statement fails, and so does the ROLLBACK after it.
        const exit = yield* Effect.exit(ledger.execute(
          { subject: "s", operation: "dies", key: "k" },
          yield* request(),
          Effect.as(sql`SELECT pg_terminate_backend(pg_backend_pid())`, MutationLedger.accept(1))
        ))
        expect(Exit.isFailure(exit) && Cause.hasDies(exit.cause)).toBe(false)
        expect(Exit.isFailure(exit) && Cause.findErrorOption(exit.cause)).toMatchObject({
          value: { _tag: "DatabaseError", retryable: true, operation: "MutationLedger.execute" }
        })
        expect(yield* sql`SELECT 1 FROM durable.mutation_records WHERE operation = 'dies'`).toEqual([])
      }))

    it.effect("spans carry no request data: subjects, keys and payloads never reach span attributes", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const outbox = yield* Outbox.Outbox
        const telemetry = Telemetry.make()
        const SUBJECT = "canary-subject-41c7"
        const KEY = "canary-key-93ab"
        const PAYLOAD = "canary-payload-77de"
        yield* telemetry.observed(Effect.gen(function*() {
          yield* ledger.execute(
            { subject: SUBJECT, operation: "op", key: KEY },
            yield* request(),
            Effect.succeed(MutationLedger.accept({ PAYLOAD }))
          )
          yield* ledger.execute({ subject: SUBJECT, operation: "op", key: KEY }, yield* request(), Effect.die("never"))
          yield* outbox.enqueue("canary", { PAYLOAD })
        }))
        expect(telemetry.spans.map((span) => span.name)).toContain("MutationLedger.execute")
        const everything = telemetry.everything()
        for (const canary of [SUBJECT, KEY, PAYLOAD]) expect(everything).not.toContain(canary)
      }))
  })
})
