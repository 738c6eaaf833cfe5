import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import * as ProjectorExample from "../examples/projector.js"
import * as WebhookExample from "../examples/webhook.js"
import * as WorkerExample from "../examples/worker.js"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/testing/TestClock"
import { outboxRows, substrate } from "./support.js"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Projector from "../src/Projector.js"

describe("the README examples of the projector do what the README says", () => {
  it.layer(substrate())((it) => {
    it.effect("projector: the routed topic is delivered, the unrouted one is a dead letter at once", () =>
      Effect.gen(function*() {
        expect(yield* ProjectorExample.program).toMatchObject({ claimed: 2, delivered: 1, dead: 1 })
      }))

    it.effect("webhook: a signed POST reaches the receiver, whose check of the raw body passes", () =>
      Effect.gen(function*() {
        const secret = Redacted.make("a webhook secret of enough bytes")
        const verified: Array<boolean> = []
        const url = yield* Effect.acquireRelease(
          Effect.callback<{ url: string; close: () => void }>((resume) => {
            const server = createServer((req, res) => {
              let body = ""
              req.on("data", (chunk) => (body += chunk))
              req.on("end", () => {
                verified.push(WebhookExample.accept(secret, String(req.headers["x-effect-durable-signature"]), body))
                res.writeHead(200).end()
              })
            })
            server.listen(0, "127.0.0.1", () =>
              resume(Effect.succeed({
                url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
                close: () => { server.closeAllConnections(); server.close() }
              })))
          }),
          (server) => Effect.sync(server.close)
        )
        const outbox = yield* Outbox.Outbox
        const id = yield* outbox.enqueue("webhook-readme", { orderId: 7 })
        // On the live clock: the signature is dated by Effect's `Clock`, the receiver checks it against the system clock.
        const counts = yield* Projector.drain({ topics: ["webhook-readme"] }).pipe(
          Effect.provide(WebhookExample.Deliver(url.url, secret)),
          TestClock.withLive
        )
        expect(counts).toMatchObject({ delivered: 1 })
        expect(verified).toEqual([true])
        expect((yield* outboxRows([id]))[0]).toMatchObject({ projected: true })
      }))

    it.effect("worker: the standalone projector process starts from its environment and refuses a bad variable by name", () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase.TestDatabase
        const env = (entries: Record<string, string>) =>
          Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord(entries))
        const base = { DATABASE_URL: Redacted.value(db.url), WEBHOOK_URL: "http://127.0.0.1:9/hook", WEBHOOK_SECRET: "sixteen bytes or more" }
        // The database is migrated (the suite's substrate): the worker starts and runs its projector.
        const workerId = yield* Effect.scoped(
          Effect.map(Layer.build(WorkerExample.Worker), (context) => Context.get(context, Projector.Projector).workerId)
        ).pipe(env({ ...base, PROJECTOR_WORKER_ID: "worker-readme" }))
        expect(workerId).toBe("worker-readme")
        const refused = yield* Effect.flip(Effect.scoped(Layer.build(WorkerExample.Worker)).pipe(env({ ...base, PROJECTOR_LEASE: "-1 seconds" })))
        expect(refused).toMatchObject({ _tag: "DurableConfigError", field: "PROJECTOR_LEASE" })
      }))
  })
})
