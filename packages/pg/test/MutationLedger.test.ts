import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as TestRole from "@effect-durable/testing/TestRole"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings, layerSettings } from "../src/DurableConfig.js"
import * as Migrations from "../src/Migrations.js"
import * as MutationLedger from "../src/MutationLedger.js"
import { barrier, sqlState, substrate, waitersOnAdvisoryLocks } from "./support.js"

const fp = (value: unknown) => Fingerprint.fingerprintOfCanonical(JSON.stringify(value))
const request = (overrides: Partial<MutationLedger.MutationRequest> = {}): MutationLedger.MutationRequest => ({
  kind: "create-order",
  eligibility: new Uint8Array([1, 0, 7]),
  fingerprint: fp({ sku: "A-1", qty: 2 }),
  ...overrides
})
let keys = 0
const identity = (): MutationLedger.MutationIdentity => ({
  subject: "tenant-7",
  operation: "create-order",
  key: `k-${++keys}`
})

// The business effect: one row per applied order, written by `decide` inside the ledger's transaction.
const placeOrder = (key: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      Effect.as(
        sql`INSERT INTO orders (idempotency_key) VALUES (${key})`,
        MutationLedger.accept({ order: key, total: 42 })
      )
  )

const ordersFor = (key: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM orders WHERE idempotency_key = ${key}`, (rows) =>
        rows[0]!.n)
  )

const recordsFor = (id: MutationLedger.MutationIdentity) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    return yield* sql<{ kind: string; status: string; response: unknown; effect_applied: boolean }>`
      SELECT kind, status, convert_from(response_body, 'UTF8')::jsonb AS response, effect_applied
        FROM ${sql.literal(settings.table("mutation_records"))}
       WHERE subject = ${id.subject} AND operation = ${id.operation} AND key = ${id.key}`
  })

/** Starts a first request whose decide waits for `hold`; returns once it is deciding (holding the lock). */
const firstRequestInFlight = (ledger: MutationLedger.MutationLedger["Service"], id: MutationLedger.MutationIdentity) =>
  Effect.gen(function*() {
    const hold = yield* Deferred.make<void>()
    const deciding = yield* Deferred.make<void>()
    const first = yield* Effect.forkChild(ledger.execute(
      id,
      request(),
      Effect.andThen(Effect.andThen(Deferred.succeed(deciding, undefined), Deferred.await(hold)), placeOrder(id.key))
    ))
    yield* Deferred.await(deciding)
    return { first, hold }
  })

// A function, not a constant: layers are memoized by reference, and each suite needs its own table.
const withOrdersTable = () =>
  Layer.effectDiscard(
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE orders (id serial PRIMARY KEY, idempotency_key text)`)
  )
// The whole suite runs in the default schema and in a quoted, mixed-case one.
describe.each(["durable", "Ledger_Mixed"])("MutationLedger in schema %s", (schema) => {
  const Live = withOrdersTable().pipe(Layer.provideMerge(substrate({ schema, lockTimeout: "3 seconds" })))
  it.layer(Live, { timeout: "60 seconds" })((it) => {
    it.effect("the first request decides and stores; an exact repeat replays without running decide", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        let runs = 0
        const decide = Effect.andThen(Effect.sync(() => runs++), placeOrder(id.key))
        const first = yield* ledger.execute(id, request(), decide)
        expect(first).toMatchObject({ _tag: "First", status: "accepted", response: { order: id.key, total: 42 } })
        const replay = yield* ledger.execute(id, request(), decide)
        expect(replay).toEqual({ ...first, _tag: "Replay" })
        expect(runs).toBe(1)
        expect(yield* ordersFor(id.key)).toBe(1)
        expect(yield* recordsFor(id)).toEqual([
          { kind: "create-order", status: "accepted", response: { order: id.key, total: 42 }, effect_applied: true }
        ])
      }))

    it.effect("a replay returns the stored response byte for byte: its key order, not jsonb's", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const response = { transferId: "t-1", amount: 100, from: "acc-1", to: "acc-2", nested: { z: 1, a: [3, 1] } }
        const first = yield* ledger.execute(id, request(), Effect.succeed(MutationLedger.accept(response)))
        const replay = yield* ledger.execute(id, request(), Effect.die("must not run"))
        const text = JSON.stringify(response)
        expect(Buffer.from(first.body).toString("utf8")).toBe(text)
        expect(Buffer.from(replay.body).toString("utf8")).toBe(text)
        expect(JSON.stringify(replay.response)).toBe(text)
        expect(Object.keys(replay.response as object)).toEqual(["transferId", "amount", "from", "to", "nested"])
      }))

    it.effect("raw bytes and their meta (an HTTP body, status and headers) are stored and replayed exactly", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const body = new Uint8Array([0, 255, 1, 128, 10, 13])
        const meta = { status: 201, headers: { "content-type": "application/octet-stream", location: "/things/1" } }
        yield* ledger.execute(id, request(), Effect.succeed(MutationLedger.bytes("accepted", body, meta)))
        const replay = yield* ledger.execute(id, request(), Effect.die("must not run"))
        expect(replay).toMatchObject({ _tag: "Replay", status: "accepted", response: null, meta })
        expect([...replay.body]).toEqual([...body])
        const stored = yield* ledger.lookup(id)
        expect(stored._tag === "Some" && [...stored.value.body]).toEqual([...body])
        expect(yield* ledger.lookup({ ...id, key: "never-used" })).toMatchObject({ _tag: "None" })
      }))

    it.effect("begin and record are execute's two steps inside the caller's transaction; outside one, begin is refused", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const first = yield* sql.withTransaction(Effect.gen(function*() {
          const begun = yield* ledger.begin(id, request())
          if (begun._tag !== "Claimed") return yield* Effect.die("expected a first request")
          yield* placeOrder(id.key)
          return yield* begun.record(MutationLedger.accept({ order: id.key }))
        }))
        expect(first).toMatchObject({ _tag: "First", response: { order: id.key } })
        const again = yield* sql.withTransaction(ledger.begin(id, request()))
        expect(again).toMatchObject({ _tag: "Replay", outcome: { _tag: "Replay", response: { order: id.key } } })
        // Rolled back after begin: no record, so the next request is a first one again.
        const other = identity()
        yield* Effect.flip(
          sql.withTransaction(Effect.andThen(ledger.begin(other, request()), Effect.fail("handler failed")))
        )
        expect((yield* sql.withTransaction(ledger.begin(other, request())))._tag).toBe("Claimed")
        expect(yield* Effect.flip(ledger.begin(identity(), request()))).toMatchObject({
          _tag: "InvalidInput",
          argument: "transaction"
        })
        expect(yield* ordersFor(id.key)).toBe(1)
      }))

    it.effect("records made before exact responses (jsonb only) still replay", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        const settings = yield* DurableSettings
        const id = identity()
        yield* sql`INSERT INTO ${sql.literal(settings.table("mutation_records"))}
                     (subject, operation, key, kind, eligibility, request_fingerprint, status, response)
                   VALUES (${id.subject}, ${id.operation}, ${id.key}, 'create-order', ${request().eligibility},
                           ${request().fingerprint}, 'accepted', '{"old": true}')`
        const replay = yield* ledger.execute(id, request(), Effect.die("must not run"))
        expect(replay).toMatchObject({ _tag: "Replay", response: { old: true } })
        expect(Buffer.from(replay.body).toString("utf8")).toBe(`{"old":true}`)
      }))

    it.effect("a response over 4 MiB is refused typed and nothing is stored", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const error = yield* Effect.flip(
          ledger.execute(id, request(), Effect.succeed(MutationLedger.accept({ blob: "x".repeat(5 * 1024 * 1024) })))
        )
        expect(error).toMatchObject({ _tag: "PayloadTooLarge", topic: id.operation, limit: 4 * 1024 * 1024 })
        expect(yield* recordsFor(id)).toEqual([])
      }))

    it.effect("a rejection is stored and replayed like an acceptance, with no effect applied", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const decide = Effect.succeed(MutationLedger.reject({ reason: "out of stock" }))
        const first = yield* ledger.execute(id, request(), decide)
        const replay = yield* ledger.execute(id, request(), Effect.die("decide must not run on a replay"))
        expect(first).toMatchObject({ _tag: "First", status: "rejected", response: { reason: "out of stock" } })
        expect(replay).toMatchObject({ _tag: "Replay", status: "rejected", response: { reason: "out of stock" } })
        expect((yield* recordsFor(id))[0]!.effect_applied).toBe(false)
      }))

    it.effect("a repeat with another kind, eligibility claim or fingerprint conflicts and changes nothing", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        yield* ledger.execute(id, request(), placeOrder(id.key))
        const before = yield* recordsFor(id)
        const variants: ReadonlyArray<readonly [Partial<MutationLedger.MutationRequest>, ReadonlyArray<string>]> = [
          [{ kind: "cancel-order" }, ["kind"]],
          [{ eligibility: new Uint8Array([1, 0, 8]) }, ["eligibility"]],
          [{ fingerprint: fp({ sku: "A-1", qty: 3 }) }, ["fingerprint"]],
          [{ kind: "x", eligibility: new Uint8Array(), fingerprint: fp(null) }, ["kind", "eligibility", "fingerprint"]]
        ]
        for (const [change, differences] of variants) {
          const conflict = yield* Effect.flip(
            ledger.execute(id, request(change), Effect.die("decide must not run on a conflict"))
          )
          expect(conflict).toMatchObject({ _tag: "MutationConflict", key: id.key, differences })
        }
        expect(yield* recordsFor(id)).toEqual(before)
        expect(yield* ordersFor(id.key)).toBe(1)
      }))

    it.effect("a failing decide stores nothing and leaves none of its writes; the retry is First", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const failing = Effect.andThen(placeOrder(id.key), Effect.fail("payment declined" as const))
        const error = yield* Effect.flip(ledger.execute(id, request(), failing))
        expect(error).toBe("payment declined")
        expect(yield* recordsFor(id)).toEqual([])
        expect(yield* ordersFor(id.key)).toBe(0)
        const retry = yield* ledger.execute(id, request(), placeOrder(id.key))
        expect(retry._tag).toBe("First")
        expect(yield* ordersFor(id.key)).toBe(1)
      }))

    it.effect("a response JSON cannot carry fails typed and rolls everything back", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const decide = Effect.as(placeOrder(id.key), MutationLedger.accept({ at: new Date() }))
        const error = yield* Effect.flip(ledger.execute(id, request(), decide))
        expect(error).toMatchObject({ _tag: "UnsupportedJsonValue", path: "$.at" })
        expect(yield* recordsFor(id)).toEqual([])
        expect(yield* ordersFor(id.key)).toBe(0)
      }))

    it.effect("inside a caller's transaction the record commits or rolls back with it", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const outer = sql.withTransaction(
          Effect.andThen(ledger.execute(id, request(), placeOrder(id.key)), Effect.fail("later step failed" as const))
        )
        expect(yield* Effect.flip(outer)).toBe("later step failed")
        expect(yield* recordsFor(id)).toEqual([])
        expect(yield* ordersFor(id.key)).toBe(0)
        const committed = yield* sql.withTransaction(ledger.execute(id, request(), placeOrder(id.key)))
        expect(committed._tag).toBe("First")
        expect(yield* recordsFor(id)).toHaveLength(1)
      }))

    it.effect("8 concurrent first requests released at a barrier: 1 First, 7 Replays, the effect applied once", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const gate = yield* barrier
        let decisions = 0
        // The winner decides only once the other seven wait on the identity's lock.
        const decide = Effect.andThen(
          Effect.andThen(Effect.sync(() => decisions++), waitersOnAdvisoryLocks(7)),
          placeOrder(id.key)
        )
        const fibers = yield* Effect.forEach(
          Array.from({ length: 8 }),
          () => Effect.forkChild(Effect.andThen(gate.wait, ledger.execute(id, request(), decide)))
        )
        yield* gate.open
        const outcomes = yield* Fiber.joinAll(fibers)
        expect(outcomes.filter((o) => o._tag === "First")).toHaveLength(1)
        expect(outcomes.filter((o) => o._tag === "Replay")).toHaveLength(7)
        expect(decisions).toBe(1)
        expect(yield* ordersFor(id.key)).toBe(1)
        expect(new Set(outcomes.map((o) => JSON.stringify([o.status, o.response, o.recordedAt]))).size).toBe(1)
      }))

    it.effect("when the winner rolls back, a waiter becomes First: no request is lost", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const deciding = yield* Deferred.make<void>()
        const winner = yield* Effect.forkChild(ledger.execute(
          id,
          request(),
          placeOrder(id.key).pipe(
            Effect.andThen(Deferred.succeed(deciding, undefined)),
            Effect.andThen(waitersOnAdvisoryLocks(1)),
            Effect.andThen(Effect.fail("crashed" as const))
          )
        ))
        yield* Deferred.await(deciding)
        const waiter = yield* Effect.forkChild(ledger.execute(id, request(), placeOrder(id.key)))
        expect(yield* Effect.flip(Fiber.join(winner))).toBe("crashed")
        const outcome = yield* Fiber.join(waiter)
        expect(outcome._tag).toBe("First")
        expect(yield* ordersFor(id.key)).toBe(1)
      }))

    it.effect("no-wait mode answers InProgress while the first request is in flight, then replays", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const { first, hold } = yield* firstRequestInFlight(ledger, id)
        const busy = yield* Effect.flip(ledger.execute(id, request(), placeOrder(id.key), { wait: false }))
        expect(busy).toMatchObject({ _tag: "MutationInProgress", key: id.key })
        yield* Deferred.succeed(hold, undefined)
        expect((yield* Fiber.join(first))._tag).toBe("First")
        const replay = yield* ledger.execute(id, request(), placeOrder(id.key), { wait: false })
        expect(replay._tag).toBe("Replay")
        const conflict = yield* Effect.flip(
          ledger.execute(id, request({ kind: "other" }), placeOrder(id.key), { wait: false })
        )
        expect(conflict._tag).toBe("MutationConflict")
        expect(yield* ordersFor(id.key)).toBe(1)
      }))

    it.effect("a lock held past the lock timeout fails with a retryable typed error", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const id = identity()
        const { first, hold } = yield* firstRequestInFlight(ledger, id)
        const impatient = MutationLedger.layer.pipe(Layer.provide(layerSettings({ schema, lockTimeout: "100 millis" })))
        const timedOut = yield* Effect.flip(
          Effect.flatMap(MutationLedger.MutationLedger, (l) => l.execute(id, request(), placeOrder(id.key))).pipe(
            Effect.provide(impatient)
          )
        )
        expect(timedOut).toMatchObject({ _tag: "DatabaseError", code: "55P03", retryable: true })
        yield* Deferred.succeed(hold, undefined)
        yield* Fiber.join(first)
        expect(yield* ordersFor(id.key)).toBe(1)
      }))

    it.effect("a decide that outlasts the statement timeout fails retryable and stores nothing", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const id = identity()
        const strict = MutationLedger.layer.pipe(
          Layer.provide(layerSettings({ schema, statementTimeout: "100 millis" }))
        )
        const slow = Effect.andThen(placeOrder(id.key), Effect.as(sql`SELECT pg_sleep(2)`, MutationLedger.accept(null)))
        const error = yield* Effect.flip(
          Effect.flatMap(MutationLedger.MutationLedger, (l) => l.execute(id, request(), slow)).pipe(
            Effect.provide(strict)
          )
        )
        // decide's own statement was cancelled: its error comes back as decide raised it.
        expect(sqlState(error)).toBe("57014")
        expect(yield* recordsFor(id)).toEqual([])
        expect(yield* ordersFor(id.key)).toBe(0)
      }))

    it.effect("invalid identities and requests are typed errors naming the field, before any SQL", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const cases: ReadonlyArray<
          readonly [MutationLedger.MutationIdentity, Partial<MutationLedger.MutationRequest>, string]
        > = [
          [{ subject: "", operation: "op", key: "k" }, {}, "identity.subject"],
          [{ subject: "s".repeat(257), operation: "op", key: "k" }, {}, "identity.subject"],
          [{ subject: "é".repeat(129), operation: "op", key: "k" }, {}, "identity.subject"],
          [{ subject: "s", operation: "op\u0000", key: "k" }, {}, "identity.operation"],
          [{ subject: "s", operation: "op", key: "" }, {}, "identity.key"],
          [{ subject: "s", operation: "op", key: "k" }, { kind: "" }, "request.kind"],
          [{ subject: "s", operation: "op", key: "k" }, { eligibility: new Uint8Array(1025) }, "request.eligibility"],
          [{ subject: "s", operation: "op", key: "k" }, {
            fingerprint: new Uint8Array(31) as Fingerprint.RequestFingerprint
          }, "request.fingerprint"]
        ]
        for (const [id, change, field] of cases) {
          const error = yield* Effect.flip(ledger.execute(id, request(change), Effect.die("must not run")))
          expect(error).toMatchObject({ _tag: "InvalidInput", argument: field })
        }
      }))

    it.effect("purge deletes records older than the retention in batches and keeps the rest", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* MutationLedger.MutationLedger
        const subject = "purge-subject"
        for (let i = 0; i < 7; i++) {
          yield* ledger.execute(
            { subject, operation: "op", key: `old-${i}` },
            request(),
            Effect.succeed(MutationLedger.accept(i))
          )
        }
        yield* ledger.execute(
          { subject, operation: "op", key: "recent" },
          request(),
          Effect.succeed(MutationLedger.accept(0))
        )
        const records = sql.literal((yield* DurableSettings).table("mutation_records"))
        yield* sql`UPDATE ${records} SET created_at = now() - interval '2 days'
                    WHERE subject = ${subject} AND key LIKE 'old-%'`
        const purged = yield* ledger.purge({ olderThan: "1 day", batchSize: 3 })
        expect(purged).toBeGreaterThanOrEqual(7)
        const left = yield* sql<{ key: string }>`SELECT key FROM ${records} WHERE subject = ${subject}`
        expect(left.map((row) => row.key)).toEqual(["recent"])
        const bad = yield* Effect.flip(ledger.purge({ olderThan: "1 day", batchSize: 0 }))
        expect(bad).toMatchObject({ _tag: "InvalidInput", argument: "batchSize" })
      }))

    it.effect("runs as a role with only USAGE on the schema and DML on its tables", () =>
      Effect.gen(function*() {
        const runtime = yield* TestRole.make("ledger_runtime")
        yield* Migrations.grantRuntimeAccess(runtime.name)
        const sql = yield* SqlClient.SqlClient
        yield* sql.unsafe(`GRANT INSERT, SELECT ON orders TO "${runtime.name}"`)
        yield* sql.unsafe(`GRANT USAGE ON SEQUENCE orders_id_seq TO "${runtime.name}"`)
        const settings = yield* DurableSettings
        const asRuntime = MutationLedger.layer.pipe(
          Layer.provideMerge(
            Layer.merge(Layer.succeed(SqlClient.SqlClient, runtime.sql), Layer.succeed(DurableSettings, settings))
          )
        )
        const id = identity()
        const outcomes = yield* Effect.gen(function*() {
          const ledger = yield* MutationLedger.MutationLedger
          return [
            yield* ledger.execute(id, request(), placeOrder(id.key)),
            yield* ledger.execute(id, request(), placeOrder(id.key))
          ]
        }).pipe(Effect.provide(asRuntime))
        expect(outcomes.map((o) => o._tag)).toEqual(["First", "Replay"])
        expect(yield* ordersFor(id.key)).toBe(1)
        const exit = yield* Effect.exit(runtime.sql.unsafe(`CREATE TABLE ${settings.table("intruder")} (id int)`))
        expect(Exit.isFailure(exit)).toBe(true)
      }).pipe(Effect.scoped))
  })
})
