import * as Cursor from "@effect-durable/core/Cursor"
import { onLiveClock } from "@effect-durable/testing/Eventually"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { describe, expect, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as CasExample from "../examples/cas.js"
import * as DatabaseExample from "../examples/database.js"
import * as FeedExample from "../examples/feed.js"
import * as FlowControlExample from "../examples/flowControl.js"
import * as InboxExample from "../examples/inbox.js"
import * as InboxLimitsExample from "../examples/inboxLimits.js"
import * as LedgerExample from "../examples/ledger.js"
import * as MigrationsExample from "../examples/migrations.js"
import * as OutboxExample from "../examples/outbox.js"
import * as PaginationTextIdsExample from "../examples/pagination-text-ids.js"
import * as PaginationExample from "../examples/pagination.js"
import * as PriorityExample from "../examples/priority.js"
import * as RateLimiterExample from "../examples/rateLimiter.js"
import * as RateLimitsExample from "../examples/rateLimits.js"
import * as SchedulesExample from "../examples/schedules.js"
import * as TransactionsExample from "../examples/transactions.js"
import * as Cas from "../src/Cas.js"
import { layerSettings } from "../src/DurableConfig.js"
import * as Keyset from "../src/Keyset.js"
import * as Migrations from "../src/Migrations.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import * as Schedules from "../src/Schedules.js"
import { database, substrate } from "./support.js"

const Live = Layer.mergeAll(
  Cas.layer,
  Keyset.layer.pipe(Layer.provide(Cursor.layer([{ id: "k1", secret: Redacted.make("readme-example-secret!") }])))
).pipe(Layer.provideMerge(substrate()))

describe("the README examples do what the README says", () => {
  it.layer(Live)((it) => {
    it.effect("ledger: First, then Replay of the same response, then a conflict on a changed amount", () =>
      Effect.gen(function*() {
        const { changed, first, retry } = yield* LedgerExample.program
        expect(first).toMatchObject({ _tag: "First", status: "accepted", response: { chargeId: 1 } })
        expect(retry).toMatchObject({ _tag: "Replay", status: "accepted", response: { chargeId: 1 } })
        expect(changed).toMatchObject({ _tag: "MutationConflict", differences: ["fingerprint"] })
      }))

    it.effect(
      "schedules: the runner defines both; the nightly report's last three nights are backfilled once",
      () =>
        Effect.gen(function*() {
          const filled = yield* SchedulesExample.operate.pipe(Effect.provide(SchedulesExample.runner))
          expect(filled).toEqual({ enqueued: 3, present: 0 })
          const schedules = yield* Schedules.Schedules
          expect((yield* schedules.list).map((s) => [s.name, s.paused])).toEqual([
            ["nightly-report", false],
            ["sweep", false]
          ])
        }),
      { timeout: 30_000 }
    )

    it.effect("flow limits: 20 at once, 2 per customer, the enterprise customer 5; the claim obeys", () =>
      Effect.gen(function*() {
        const limits = yield* FlowControlExample.configure
        expect(limits.find((l) => l.topic === "emails")).toMatchObject({
          maxInFlight: 20,
          groupMaxInFlight: 2,
          groups: [{ group: "customer-42", maxInFlight: 5, weight: 3 }]
        })
        for (let i = 0; i < 10; i++) {
          yield* FlowControlExample.send("customer-42", `a${i}@example.com`)
          yield* FlowControlExample.send("customer-7", `b${i}@example.com`)
        }
        const worker = yield* OutboxWorker.OutboxWorker
        const claimed = yield* worker.claim({ worker: "w", topics: ["emails"], limit: 100, lease: "1 minute" })
        expect(claimed).toHaveLength(7)
      }))

    it.effect("rate limits: the topic's burst of 10, each recipient's 3", () =>
      Effect.gen(function*() {
        const limits = yield* RateLimitsExample.configure
        expect(limits.find((l) => l.topic === "sms")).toMatchObject({
          rate: { limit: 10, perMillis: 1000, burst: 10 },
          groupRate: { limit: 1, perMillis: 1000, burst: 3 }
        })
        for (let i = 0; i < 6; i++) {
          yield* RateLimitsExample.text("+15550001", `a${i}`)
          yield* RateLimitsExample.text("+15550002", `b${i}`)
        }
        const worker = yield* OutboxWorker.OutboxWorker
        const claimed = yield* worker.claim({ worker: "w", topics: ["sms"], limit: 100, lease: "1 minute" })
        expect(claimed).toHaveLength(6)
      }))

    it.effect("inbox limits: three workers at once take 4 payments between them, a redelivery is stored once", () =>
      Effect.gen(function*() {
        const limits = yield* InboxLimitsExample.configure
        expect(limits.find((l) => l.consumer === "payments")).toMatchObject({
          maxInFlight: 4,
          rate: { limit: 100, perMillis: 60_000, burst: 100 },
          updatedBy: "deploy"
        })
        for (let i = 0; i < 10; i++) expect(yield* InboxLimitsExample.receive(`pay-${i}`, { amount: i })).toBe("New")
        expect(yield* InboxLimitsExample.receive("pay-0", { amount: 0 })).toBe("Duplicate")
        // Three workers at once; every charge is held until the test lets them go.
        const release = yield* Deferred.make<void>()
        const allClaimed = yield* Deferred.make<void>()
        let charging = 0
        const chargingBy = new Set<string>()
        const emptyHanded = new Set<string>()
        // Four charging, and every worker's claim returned (a worker with nothing has finished):
        // a worker whose claim ran after the release would see the four settled.
        const check = Effect.suspend(() =>
          charging === 4 && chargingBy.size + emptyHanded.size === 3
            ? Deferred.succeed(allClaimed, undefined)
            : Effect.void
        )
        const charge = (worker: string) => () =>
          Effect.andThen(
            Effect.suspend(() => {
              charging++
              chargingBy.add(worker)
              return check
            }),
            Deferred.await(release)
          )
        const workers = yield* Effect.forEach(
          ["w1", "w2", "w3"],
          (worker) =>
            Effect.forkChild(Effect.tap(InboxLimitsExample.work(worker, charge(worker)), (n) =>
              Effect.suspend(() => {
                if (n === 0) emptyHanded.add(worker)
                return check
              })))
        )
        yield* Deferred.await(allClaimed)
        // While four are being charged, another worker gets nothing.
        expect(yield* InboxLimitsExample.work("w4", charge("w4"))).toBe(0)
        yield* Deferred.succeed(release, undefined)
        const taken = yield* Effect.forEach(workers, Fiber.join)
        expect(taken.reduce((a, b) => a + b, 0)).toBe(4)
        expect(charging).toBe(4)
      }))

    it.effect("priority: a reset enqueued behind a campaign goes first, then the receipt, then the newsletters", () =>
      Effect.gen(function*() {
        yield* PriorityExample.campaign(Array.from({ length: 200 }, (_, i) => `reader${i}@example.com`))
        yield* PriorityExample.send("receipt", "buyer@example.com")
        yield* PriorityExample.send("reset", "locked-out@example.com")
        const worker = yield* OutboxWorker.OutboxWorker
        const next = Effect.map(
          worker.claim({ worker: "w", topics: ["mail"], limit: 1, lease: "1 minute" }),
          ([message]) => message!.payload
        )
        expect(yield* next).toEqual({ kind: "reset", to: "locked-out@example.com" })
        expect(yield* next).toEqual({ kind: "receipt", to: "buyer@example.com" })
        expect(yield* next).toEqual({ kind: "newsletter", to: "reader0@example.com" })
      }))

    it.effect("effect's RateLimiter on the PostgreSQL store: 100 calls a minute per account, then a refusal with retryAfter", () =>
      Effect.gen(function*() {
        let calls = 0
        const run = Effect.gen(function*() {
          for (let i = 0; i < 100; i++) yield* RateLimiterExample.callPartner("acme", Effect.sync(() => calls++))
          for (let i = 0; i < 100; i++) yield* RateLimiterExample.tryPartner("acme")
          return yield* Effect.flip(RateLimiterExample.tryPartner("acme"))
        })
        const refused = yield* run.pipe(Effect.provide(RateLimiterExample.RateLimiterLive))
        expect(calls).toBe(100)
        expect(refused.reason._tag).toBe("RateLimitExceeded")
      }))

    it.effect("cas: the first save wins, the second gets the revision it lost to", () =>
      Effect.gen(function*() {
        const { lost, saved } = yield* CasExample.program
        expect(saved).toBe(2n)
        expect(lost).toMatchObject({ _tag: "CasConflict", actualRevision: 2n })
      }))

    it.effect("outbox: the message commits with the order, once per idempotency key, and is claimed and marked", () =>
      Effect.gen(function*() {
        const payloads = yield* OutboxExample.program
        expect(payloads).toEqual([{ orderId: 1, sku: "A-1", qty: 2 }])
      }))

    it.effect("feed: both consumers read the three sales; the totals count each sale once", () =>
      Effect.gen(function*() {
        const { exported, totals } = yield* onLiveClock(FeedExample.program)
        expect(totals).toEqual([{ customer: "ada", cents: "1500" }, { customer: "grace", cents: "800" }])
        expect(exported).toHaveLength(3)
        expect(new Set(exported).size).toBe(3)
      }))

    it.effect("inbox: the redelivery is a duplicate and the invoice exists once", () =>
      Effect.gen(function*() {
        expect(yield* InboxExample.program).toEqual({ first: "Processed", redelivered: "Duplicate", invoices: 1 })
      }))

    it.effect("pagination: an account's EUR transfers, sent or received, oldest first, two per page", () =>
      Effect.gen(function*() {
        // One statement inserts all rows with one booked_at, so id breaks the tie.
        expect(yield* PaginationExample.program).toEqual([[10, 20], [50, 60]])
      }))

    it.effect("pagination over text ids: char(26), text under a validated CHECK, text with a declared bound", () =>
      Effect.gen(function*() {
        const newestFirst = ["01JCCCCCCCCCCCCCCCCCCCCCCC", "01JBBBBBBBBBBBBBBBBBBBBBBB", "01JAAAAAAAAAAAAAAAAAAAAAAA"]
        expect(yield* PaginationTextIdsExample.program).toEqual({
          receipts: newestFirst,
          members: newestFirst,
          comments: newestFirst
        })
      }))
  })
})

describe("the README's application database and migrations", () => {
  it.layer(database())((it) => {
    it.effect("database: with DATABASE_URL set, the layer migrates that database and serves the substrate", () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase.TestDatabase
        const provider = ConfigProvider.fromEnvRecord({ ["DATABASE_URL"]: Redacted.value(db.url) })
        const answer = yield* DatabaseExample.program.pipe(
          Effect.provide(DatabaseExample.Database),
          Effect.provideService(ConfigProvider.ConfigProvider, provider)
        )
        expect(answer).toBe("function")
      }))

    it.effect("migrations: migrate reaches the latest version, the schema verifies clean, the runtime role is granted", () =>
      Effect.gen(function*() {
        const { drift, report } = yield* MigrationsExample.program.pipe(
          Effect.provide(layerSettings({ schema: "readme_migrations" }))
        )
        expect(report.version).toBe(Migrations.latestVersion)
        expect(drift).toEqual([])
      }))
  })
  it.layer(substrate())((it) => {
    it.effect("transactions: the invoice run takes its customer's lock and invoices", () =>
      Effect.gen(function*() {
        expect(yield* TransactionsExample.program).toBe("invoiced")
      }))
  })
})
