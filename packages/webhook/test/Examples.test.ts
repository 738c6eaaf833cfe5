import * as Outbox from "@effect-durable/pg/Outbox"
import * as Projector from "@effect-durable/projector/Projector"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { describe, expect, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as TestClock from "effect/testing/TestClock"
import * as WebhookExample from "../examples/webhook.js"
import * as WorkerExample from "../examples/worker.js"
import { outboxRows, server, substrate } from "./support.js"

describe("the README examples of the webhook publisher do what the README says", () => {
  it.layer(substrate())((it) => {
    it.effect("webhook: a signed POST reaches the receiver, whose check of the raw body passes", () =>
      Effect.gen(function*() {
        const whsec = `whsec_${Buffer.from("a webhook key of enough bytes").toString("base64")}`
        const secret = Redacted.make(whsec)
        const { received, url } = yield* server((_, res) => res.writeHead(200).end())
        const outbox = yield* Outbox.Outbox
        const id = yield* outbox.enqueue("webhook-readme", { orderId: 7 })
        // On the live clock: the signature is dated by Effect's `Clock`, the receiver checks it against the system clock.
        const counts = yield* Projector.drain({ topics: ["webhook-readme"] }).pipe(
          Effect.provide(WebhookExample.Deliver(url, secret)),
          TestClock.withLive
        )
        expect(counts).toMatchObject({ delivered: 1 })
        const headers = received.map((request) => request.headers as Record<string, string>)
        expect(received.map((request, i) => WebhookExample.accept(secret, headers[i]!, request.body))).toEqual([true])
        expect(WebhookExample.acceptStock(whsec, headers[0]!, received[0]!.body)).toMatchObject({
          id,
          payload: { orderId: 7 }
        })
        expect((yield* outboxRows([id]))[0]).toMatchObject({ projected: true })
      }))

    it.effect("worker: the standalone projector process starts from its environment and refuses a bad variable by name", () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase.TestDatabase
        const env = (entries: Record<string, string>) =>
          Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord(entries))
        const base = {
          DATABASE_URL: Redacted.value(db.url),
          WEBHOOK_URL: "http://127.0.0.1:9/hook",
          WEBHOOK_SECRET: "sixteen bytes or more"
        }
        // The database is migrated (the suite's substrate): the worker starts and runs its projector.
        const workerId = yield* Effect.scoped(
          Effect.map(Layer.build(WorkerExample.Worker), (context) => Context.get(context, Projector.Projector).workerId)
        ).pipe(env({ ...base, PROJECTOR_WORKER_ID: "worker-readme" }))
        expect(workerId).toBe("worker-readme")
        const refused = yield* Effect.flip(
          Effect.scoped(Layer.build(WorkerExample.Worker)).pipe(env({ ...base, PROJECTOR_LEASE: "-1 seconds" }))
        )
        expect(refused).toMatchObject({ _tag: "DurableConfigError", field: "PROJECTOR_LEASE" })
        const unsigned = yield* Effect.flip(
          Effect.scoped(Layer.build(WorkerExample.Worker)).pipe(env({ ...base, WEBHOOK_SECRET: "short" }))
        )
        expect(unsigned).toMatchObject({ _tag: "DurableConfigError", field: "webhook.secret" })
      }))
  })
})
