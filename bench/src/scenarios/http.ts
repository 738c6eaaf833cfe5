// Scenario 6: HTTP requests through the Idempotency-Key middleware (`Idempotency.wrapper` on
// an HttpLayerRouter route) against the same handler without it, on one server: first
// requests (each with a new key: the ledger's transaction around the handler), then exact
// replays of every one of them, with p50/p99 latency. The handler inserts a business row and
// enqueues one message, in a transaction of its own when plain.
import * as Idempotency from "@effect-durable/http/Idempotency"
import * as Subject from "@effect-durable/http/Subject"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import * as Http from "node:http"
import { formatRate, median, percentile } from "../common.js"
import * as EffectDurable from "../contenders/effectDurable.js"
import { alternate, type Bench, progress } from "../harness.js"

export const CONCURRENCY = 16

interface Phase {
  readonly rate: number
  readonly p50: number
  readonly p99: number
}

export interface HttpResult {
  readonly plain: Phase
  readonly first: Phase
  readonly replay: Phase
  readonly rounds: ReadonlyArray<{ plain: Phase; first: Phase; replay: Phase }>
}

/** The business effect: one row and one outbox message, in the transaction it runs in. */
const placeOrder = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const outbox = yield* Outbox.Outbox
  const request = yield* HttpServerRequest.HttpServerRequest
  const body = (yield* request.json) as { readonly cents: number }
  const [row] = yield* sql<{ id: string }>`INSERT INTO orders (cents) VALUES (${body.cents}) RETURNING id::text AS id`
  yield* outbox.enqueue("order-placed", { orderId: row!.id, cents: body.cents })
  return yield* HttpServerResponse.json({ orderId: row!.id, cents: body.cents }, { status: 201 })
}).pipe(Effect.orDie)

const Routes = HttpRouter.addAll(Effect.gen(function*() {
  const idempotent = yield* Idempotency.wrapper()
  const sql = yield* SqlClient.SqlClient
  return [
    HttpRouter.route("POST", "/plain", sql.withTransaction(placeOrder).pipe(Effect.orDie)),
    HttpRouter.route("POST", "/orders", idempotent.required(placeOrder))
  ]
})).pipe(Layer.provide(Subject.identify(() => Effect.succeed(Option.some("bench"))).layer))

const agent = new Http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })

const post = (port: number, path: string, body: string, key?: string) =>
  new Promise<number>((resolve, reject) => {
    const headers: Record<string, string> = {
      "content-type": "application/json",
      "content-length": String(Buffer.byteLength(body))
    }
    if (key !== undefined) headers["idempotency-key"] = key
    const request = Http.request({ host: "127.0.0.1", port, path, method: "POST", headers, agent }, (response) => {
      response.resume()
      response.on("end", () => resolve(response.statusCode!))
      response.on("error", reject)
    })
    request.on("error", reject)
    request.end(body)
  })

/** Sends `count` requests, CONCURRENCY at a time; every answer must have `status`. */
const load = async (count: number, status: number, send: (i: number) => Promise<number>): Promise<Phase> => {
  const times: Array<number> = []
  let next = 0
  const started = performance.now()
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < count) {
      const i = next++
      const sent = performance.now()
      const got = await send(i)
      if (got !== status) throw new Error(`request ${i}: expected ${status}, got ${got}`)
      times.push(performance.now() - sent)
    }
  }))
  const seconds = (performance.now() - started) / 1000
  const sorted = times.sort((a, b) => a - b)
  return { rate: count / seconds, p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99) }
}

const describe = (phase: Phase) =>
  `${formatRate(phase.rate).padStart(6)} req/s  p50 ${phase.p50.toFixed(2)} ms  p99 ${phase.p99.toFixed(2)} ms`

export const run = async (bench: Bench, requests: number): Promise<HttpResult> => {
  const measure = async (mode: "plain" | "idempotent", round: number, index: number) => {
    const database = `bench_http_${index}`
    const url = await bench.freshDatabase(database)
    await bench.execute(url, "CREATE TABLE orders (id bigserial PRIMARY KEY, cents int NOT NULL)")
    const result = await EffectDurable.run(
      url,
      Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(
          HttpRouter.serve(Routes, { disableLogger: true, disableListenLog: true }).pipe(
            Layer.provide(Idempotency.layerRedactKeyHeader()),
            Layer.provideMerge(NodeHttpServer.layer(Http.createServer, { port: 0, host: "127.0.0.1" }))
          )
        )
        const address = Context.get(context, HttpServer.HttpServer).address
        const port = address._tag === "UnixPathAddress" ? 0 : address.port
        const body = (i: number) => JSON.stringify({ cents: 100 + i })
        if (mode === "plain") {
          return { first: yield* Effect.promise(() => load(requests, 201, (i) => post(port, "/plain", body(i)))) }
        }
        const first = yield* Effect.promise(() =>
          load(requests, 201, (i) => post(port, "/orders", body(i), `order-${i}`))
        )
        const replay = yield* Effect.promise(() =>
          load(requests, 201, (i) => post(port, "/orders", body(i), `order-${i}`))
        )
        return { first, replay }
      })),
      CONCURRENCY + 4
    )
    await bench.dropDatabase(database)
    progress(round, mode === "plain" ? "plain handler" : "Idempotency-Key", describe(result.first))
    if (result.replay !== undefined) progress(round, "Idempotency-Key replays", describe(result.replay))
    return result
  }
  const [plain, idempotent] = await alternate(bench, ["plain", "idempotent"] as const, measure)
  const med = (phases: ReadonlyArray<Phase>): Phase => ({
    rate: median(phases.map((p) => p.rate)),
    p50: median(phases.map((p) => p.p50)),
    p99: median(phases.map((p) => p.p99))
  })
  return {
    plain: med(plain!.map((r) => r.first)),
    first: med(idempotent!.map((r) => r.first)),
    replay: med(idempotent!.map((r) => r.replay!)),
    rounds: plain!.map((p, i) => ({ plain: p.first, first: idempotent![i]!.first, replay: idempotent![i]!.replay! }))
  }
}
