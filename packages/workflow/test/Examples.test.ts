import * as Durable from "@effect-durable/pg/Durable"
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as WorkflowDeploys from "@effect-durable/workflow/WorkflowDeploys"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import * as Deadline from "../examples/deadline.js"
import * as Deploys from "../examples/deploys.js"
import * as Limits from "../examples/limits.js"
import * as Order from "../examples/order.js"

describe("the workflow guide's example does what the guide says", () => {
  it.layer(TestDatabase.layerFresh({ applicationName: "workflow-example-test" }), { excludeTestServices: true })(
    (it) => {
      it.effect("an order: started in the business transaction, waits for its payment signal, ships once", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const db = yield* TestDatabase.TestDatabase
          yield* sql`CREATE TABLE orders (id text PRIMARY KEY, amount numeric NOT NULL)`
          yield* sql`CREATE TABLE order_events (order_id text NOT NULL, event text NOT NULL)`
          const events = (orderId: string) =>
            Effect.map(
              sql<{ event: string }>`SELECT event FROM order_events WHERE order_id = ${orderId} ORDER BY ctid`,
              (rows) => rows.map((row) => row.event)
            )
          yield* Effect.gen(function*() {
            const executionId = yield* Order.placeOrder("A-1", 30)
            // The same order twice: one execution (the business row's key refuses the second).
            expect(yield* Effect.flip(Order.placeOrder("A-1", 30))).toBeDefined()
            yield* eventually(events("A-1"), (e) => e.length === 1)
            yield* Order.paymentAuthorized("A-1", "auth-77")
            const result = yield* eventually(
              Order.PlaceOrder.poll(executionId),
              (r) => Option.isSome(r) && r.value._tag === "Complete"
            )
            expect(Option.isSome(result)).toBe(true)
            expect(yield* Order.PlaceOrder.execute({ orderId: "A-1", amount: 30 })).toBe("order A-1 shipped")
            expect(yield* events("A-1")).toEqual(["reserved", "charged 30 (auth-77)", "shipped"])
          }).pipe(Effect.provide(Order.AppLayer({ url: db.url, applicationName: "workflow-example" })))
        }))

      it.effect("a shipment: a dead booking fails its wait with the reason, no answer ends at the deadline, an answer completes it", () =>
        Effect.gen(function*() {
          const db = yield* TestDatabase.TestDatabase
          yield* Effect.gen(function*() {
            const sql = yield* SqlClient.SqlClient
            const completed = (executionId: string) =>
              Effect.map(
                eventually(
                  Deadline.Shipment.poll(executionId),
                  (r) => Option.isSome(r) && r.value._tag === "Complete"
                ),
                (r) => Option.getOrThrow(r)
              )
            const booking = (parcelId: string) =>
              Effect.map(
                eventually(
                  sql<{ token: string }>`SELECT payload->>'token' AS token FROM durable.outbox
                                          WHERE topic = 'courier.book' AND payload->>'parcelId' = ${parcelId}`,
                  (rows) => rows.length === 1
                ),
                (rows) => rows[0]!.token
              )
            // The courier refuses P-1 for good: its booking dies; the sweep fails the wait.
            const refused = yield* Deadline.Shipment.execute({ parcelId: "P-1", waitMillis: 3_600_000 }, {
              discard: true
            })
            yield* booking("P-1")
            yield* TestSubstrate.settleByHand("dead", `topic = 'courier.book' AND payload->>'parcelId' = 'P-1'`, {
              last_error: "'no courier serves this area'"
            })
            expect(yield* Deadline.failDeadBookings).toBe(1)
            expect(yield* completed(refused)).toEqual(
              new Workflow.Complete({ exit: Exit.fail({ reason: "no courier serves this area" }) })
            )
            // No answer for P-2: the deadline ends the wait.
            const silent = yield* Deadline.Shipment.execute({ parcelId: "P-2", waitMillis: 500 }, { discard: true })
            yield* completed(silent)
            const timedOut = yield* Effect.flip(Deadline.Shipment.execute({ parcelId: "P-2", waitMillis: 500 }))
            expect(timedOut).toMatchObject({ _tag: "DeadlinePassed", deferred: "PickedUp", within: "500ms" })
            // P-3's courier answers in time.
            const answered = yield* Deadline.Shipment.execute({ parcelId: "P-3", waitMillis: 3_600_000 }, {
              discard: true
            })
            yield* DurableDeferred.succeed(Deadline.PickedUp, {
              token: (yield* booking("P-3")) as DurableDeferred.Token,
              value: "courier 7"
            })
            expect(yield* completed(answered)).toEqual(
              new Workflow.Complete({ exit: Exit.succeed("parcel P-3 picked up by courier 7") })
            )
          }).pipe(Effect.provide(Deadline.AppLayer({ url: db.url, applicationName: "workflow-example" })))
        }))

      it.effect("charges under a tenant limit: at most two of a tenant's gateway calls overlap, each invoice charged once", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const db = yield* TestDatabase.TestDatabase
          yield* sql`CREATE TABLE gateway_calls (
            tenant text NOT NULL, invoice text PRIMARY KEY, amount numeric NOT NULL,
            started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz)`
          yield* Effect.gen(function*() {
            yield* Limits.configure
            const invoices = [
              ...Array.from({ length: 6 }, (_, i) => ({ tenant: "acme", invoice: `acme-${i}`, amount: 10 + i })),
              ...Array.from({ length: 2 }, (_, i) => ({ tenant: "globex", invoice: `globex-${i}`, amount: 20 + i }))
            ]
            const results = yield* Effect.forEach(invoices, (payload) => Limits.Invoice.execute(payload), {
              concurrency: "unbounded"
            })
            expect(results).toEqual(invoices.map(({ amount, invoice }) => `invoice ${invoice}: charged ${amount}`))
          }).pipe(Effect.provide(Limits.AppLayer({ url: db.url, applicationName: "workflow-limits-example" })))
          // The most calls of one tenant in progress at any call's start.
          const overlap = yield* sql<{ tenant: string; calls: number; most: number }>`
            SELECT a.tenant, count(*)::int AS calls,
                   max((SELECT count(*) FROM gateway_calls b
                         WHERE b.tenant = a.tenant AND b.started_at <= a.started_at AND b.ended_at > a.started_at))::int AS most
              FROM gateway_calls a GROUP BY a.tenant ORDER BY a.tenant`
          expect(overlap.map(({ calls, tenant }) => ({ tenant, calls }))).toEqual([
            { tenant: "acme", calls: 6 },
            { tenant: "globex", calls: 2 }
          ])
          for (const row of overlap) expect(row.most).toBeLessThanOrEqual(2)
        }))
      it.effect("a deploy: the replay test passes, the charged checkout keeps the old branch and gets the appended receipt, a new one is checked first, the operator sees both; a pinned run waits for its version", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const db = yield* TestDatabase.TestDatabase
          yield* sql`CREATE TABLE checkout_events (order_id text NOT NULL, event text NOT NULL)`
          const events = (orderId: string) =>
            Effect.map(
              sql<{ event: string }>`SELECT event FROM checkout_events WHERE order_id = ${orderId} ORDER BY ctid`,
              (rows) => rows.map((row) => row.event)
            )
          const suspended = (executionId: string) =>
            eventually(
              Deploys.Checkout.poll(executionId),
              (r) => Option.isSome(r) && r.value._tag === "Suspended"
            )
          const delivered = (executionId: string) =>
            Effect.andThen(
              DurableDeferred.succeed(Deploys.Delivered, {
                token: DurableDeferred.tokenFromExecutionId(Deploys.Delivered, {
                  workflow: Deploys.Checkout,
                  executionId
                }),
                value: "courier 7"
              }),
              eventually(Deploys.Checkout.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Complete")
            )
          const connection = { url: db.url, applicationName: "workflow-deploys-example" }
          // Version 1 charges C-1, which waits for its delivery.
          const old = yield* Effect.tap(
            Deploys.Checkout.execute({ orderId: "C-1" }, { discard: true }),
            suspended
          ).pipe(Effect.provide(Deploys.AppLayer(Deploys.CheckoutV1, "v1", connection)))
          // Before the deploy: version 2 replays C-1's journal.
          const replayed = yield* Deploys.replayTest.pipe(Effect.provide(Durable.layer({ connection })))
          expect(replayed.map((r) => r.executionId)).toEqual([old])
          // Version 2 deployed: C-2 new (checked, then charged), C-1 delivered (on the old branch, then the receipt).
          yield* Effect.gen(function*() {
            const fresh = yield* Deploys.Checkout.execute({ orderId: "C-2" }, { discard: true })
            yield* suspended(fresh)
            // What the operator sees: both runs unfinished, C-1 of v1 and C-2 of v2; C-2 on the patched
            // branch, C-1 not there yet (its next run decides).
            const during = yield* Deploys.deployView
            expect(during.versions.map((v) => `${v.version} ${v.unfinished}`)).toEqual(["v1 1", "v2 1"])
            expect(during.fraudCheck).toMatchObject({ patched: 1, unpatched: 0, undecided: 1, droppable: false })
            yield* delivered(old)
            yield* delivered(fresh)
            // Both done: nothing left that needs the old branch.
            expect((yield* Deploys.deployView).fraudCheck.droppable).toBe(true)
          }).pipe(Effect.provide(Deploys.AppLayer(Deploys.CheckoutV2, "v2", connection)))
          expect([yield* events("C-1"), yield* events("C-2")]).toEqual([
            ["charge", "receipt"],
            ["fraud-check", "charge", "receipt"]
          ])
          // Pinned: C-3, started by a pinned process of v2, is delivered while only v1 runs: it waits,
          // shown stranded, and ends on v2 once a process of v2 is back.
          const pinned = yield* Effect.tap(Deploys.Checkout.execute({ orderId: "C-3" }, { discard: true }), suspended)
            .pipe(Effect.provide(Deploys.AppLayer(Deploys.CheckoutV2, "v2", connection, true)))
          yield* Effect.gen(function*() {
            yield* DurableDeferred.succeed(Deploys.Delivered, {
              token: DurableDeferred.tokenFromExecutionId(Deploys.Delivered, {
                workflow: Deploys.Checkout,
                executionId: pinned
              }),
              value: "courier 9"
            })
            const deploys = yield* WorkflowDeploys.make
            const stranded = yield* deploys.stranded({ workflow: "Checkout", after: "0 seconds", limit: 10 })
            expect(stranded.map((run) => `${run.executionId} ${run.version}`)).toEqual([`${pinned} v2`])
          }).pipe(Effect.provide(Deploys.AppLayer(Deploys.CheckoutV1, "v1", connection)))
          yield* eventually(Deploys.Checkout.poll(pinned), (r) => Option.isSome(r) && r.value._tag === "Complete").pipe(
            Effect.provide(Deploys.AppLayer(Deploys.CheckoutV2, "v2", connection))
          )
          expect(yield* events("C-3")).toEqual(["fraud-check", "charge", "receipt"])
        }))
    }
  )
})
