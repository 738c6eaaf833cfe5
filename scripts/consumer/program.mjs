// The consumer test's program: what an application does with the published packages, run
// by plain `node` in a project outside the workspace (scripts/consumer-test.sh).
// 1. every public module of every package loads from dist; internal/ modules are sealed;
// 2. against DATABASE_URL, or the development database when it is not set: a command
//    through the ledger enqueues a message in its transaction, its retry is replayed, and
//    the projector delivers the one message exactly once;
// 3. an HttpApi with the Idempotency-Key middleware on a real port: a retried POST is
//    replayed, its effect ran once;
// 4. the installed `effect-durable` command reads the same database (`status --json`).
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as DevDatabase from "@effect-durable/embedded/DevDatabase"
import * as Idempotency from "@effect-durable/http/Idempotency"
import * as Subject from "@effect-durable/http/Subject"
import * as Durable from "@effect-durable/pg/Durable"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Config, Effect, Layer, Option, Redacted, Ref, Schedule, Schema } from "effect"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as SqlClient from "effect/sql/SqlClient"
import assert from "node:assert/strict"
import { execFileSync } from "node:child_process"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { createServer } from "node:http"
import { join } from "node:path"

// The packages consumer-test.sh packed and installed: every library package of the workspace.
const PACKAGES = (process.env.EFFECT_DURABLE_PACKAGES ?? "").split(" ").filter((name) => name !== "")
assert.ok(PACKAGES.length > 0, "EFFECT_DURABLE_PACKAGES names the installed packages (consumer-test.sh sets it)")

// 1. Every module the exports map offers, and nothing under internal/.
let modules = 0
for (const name of PACKAGES) {
  const root = join(process.cwd(), "node_modules", "@effect-durable", name)
  const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"))
  assert.equal(manifest.exports["./internal/*"], null, `${name} seals internal/`)
  for (const file of readdirSync(join(root, "dist")).filter((f) => f.endsWith(".js") && f !== "bin.js")) {
    // Loads (a module of types only, such as pg/LeasedQueue, has no runtime exports).
    await import(`@effect-durable/${name}/${file.slice(0, -3)}`)
    modules++
  }
  const internal = existsSync(join(root, "dist", "internal"))
    ? readdirSync(join(root, "dist", "internal")).find((f) => f.endsWith(".js"))
    : undefined
  if (internal !== undefined) {
    await assert.rejects(import(`@effect-durable/${name}/internal/${internal.slice(0, -3)}`), {
      code: "ERR_PACKAGE_PATH_NOT_EXPORTED"
    })
  }
}
console.log(`consumer: ${modules} public modules load with plain node; internal/ is sealed`)

// 2. Ledger + outbox + projector on a real PostgreSQL, in a schema of this run.
const schema = `consumer_${process.pid}`
process.env.DURABLE_SCHEMA = schema

const placeOrder = (key, order) =>
  Effect.gen(function*() {
    const ledger = yield* MutationLedger.MutationLedger
    const outbox = yield* Outbox.Outbox
    const sql = yield* SqlClient.SqlClient
    return yield* ledger.execute(
      { subject: "acme", operation: "place-order", key },
      { kind: "order", eligibility: new Uint8Array(), fingerprint: yield* Fingerprint.fingerprint(order) },
      Effect.gen(function*() {
        const [row] = yield* sql`INSERT INTO ${
          sql(schema)
        }.orders (sku, qty) VALUES (${order.sku}, ${order.qty}) RETURNING id`
        yield* outbox.enqueue("order-placed", { orderId: row.id, ...order })
        return MutationLedger.accept({ orderId: row.id })
      })
    )
  })

// 3. The same command behind HTTP: POST /orders with an Idempotency-Key.
class OrdersApi extends HttpApi.make("orders").add(
  HttpApiGroup.make("orders")
    .add(
      HttpApiEndpoint.post("place", "/orders", {
        payload: Schema.Struct({ sku: Schema.String, qty: Schema.Int }),
        success: Schema.Struct({ orderId: Schema.Number }).pipe(HttpApiSchema.status(201))
      }).pipe(Idempotency.endpoint({ required: true }))
    )
    .middleware(Subject.Identify)
) {}

const OrdersLive = HttpApiBuilder.group(OrdersApi, "orders", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return handlers.handle("place", ({ payload }) =>
      Effect.gen(function*() {
        const [row] = yield* sql`INSERT INTO ${
          sql(schema)
        }.orders (sku, qty) VALUES (${payload.sku}, ${payload.qty}) RETURNING id`
        return { orderId: row.id }
      }).pipe(Effect.orDie))
  }))

const server = HttpRouter.serve(
  HttpApiBuilder.layer(OrdersApi).pipe(
    Layer.provide(OrdersLive),
    Layer.provide([Idempotency.layer(OrdersApi), Subject.layerIdentify(() => Effect.succeed(Option.some("acme")))])
  ),
  { disableListenLog: true, disableLogger: true }
).pipe(
  Layer.provide(Idempotency.layerRedactKeyHeader()),
  Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" }))
)

const main = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const delivered = yield* Ref.make([])
  const publisher = Publisher.layerHandler((message) => Ref.update(delivered, (all) => [...all, message.payload]))
  yield* sql`CREATE TABLE ${sql(schema)}.orders (id serial PRIMARY KEY, sku text NOT NULL, qty int NOT NULL)`
  const first = yield* placeOrder("checkout-1", { sku: "A-1", qty: 2 })
  const retry = yield* placeOrder("checkout-1", { sku: "A-1", qty: 2 })
  assert.equal(first._tag, "First")
  assert.equal(retry._tag, "Replay")
  assert.deepEqual(retry.response, first.response)
  // The projector runs in this scope from here on.
  yield* Layer.build(
    Projector.layer({ topics: ["order-placed"], pollInterval: "100 millis" }).pipe(Layer.provide(publisher))
  )
  const admin = yield* OutboxAdmin.OutboxAdmin
  yield* admin.unprojectedCount("order-placed").pipe(
    Effect.repeat({ until: (n) => n === 0, schedule: Schedule.spaced("20 millis") }),
    Effect.timeout("30 seconds")
  )
  // The row is marked projected when the handler has run: the payload is in by now.
  const payloads = yield* Ref.get(delivered)
  assert.deepEqual(payloads, [{ orderId: first.response.orderId, sku: "A-1", qty: 2 }])
  console.log(`consumer: ledger First then Replay, one message delivered by the projector (schema ${schema})`)

  // 3. HTTP: the same key twice answers the same order; one row was written.
  const context = yield* Layer.build(server)
  const address = (yield* HttpServer.HttpServer.pipe(Effect.provide(Layer.succeedContext(context)))).address
  const post = () =>
    Effect.promise(() =>
      fetch(`http://127.0.0.1:${address.port}/orders`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": "\"order-7\"" },
        body: JSON.stringify({ sku: "B-2", qty: 1 })
      }).then(async (response) => ({
        status: response.status,
        replayed: response.headers.get("idempotent-replayed"),
        body: await response.text()
      }))
    )
  const created = yield* post()
  const replayed = yield* post()
  assert.equal(created.status, 201, created.body)
  assert.equal(replayed.status, 201, replayed.body)
  assert.equal(replayed.replayed, "true")
  assert.equal(replayed.body, created.body)
  const [{ n }] = yield* sql`SELECT count(*)::int AS n FROM ${sql(schema)}.orders WHERE sku = 'B-2'`
  assert.equal(n, 1)
  console.log(
    "consumer: HTTP POST with an Idempotency-Key: 201, then the same 201 replayed; the order was written once"
  )

  // 4. The command, installed in node_modules/.bin, on the same database.
  const url = Redacted.value(yield* Config.Redacted("DATABASE_URL"))
  const status = JSON.parse(execFileSync(join("node_modules", ".bin", "effect-durable"), ["status", "--json"], {
    env: { ...process.env, DATABASE_URL: url, DURABLE_SCHEMA: schema },
    encoding: "utf8"
  }))
  assert.ok(JSON.stringify(status).includes("order-placed"), JSON.stringify(status))
  console.log("consumer: effect-durable status --json lists the topic")
}).pipe(
  Effect.scoped,
  // After the scope: the projector has stopped, so it never claims from a dropped schema.
  Effect.andThen(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DROP SCHEMA ${sql(schema)} CASCADE`))
)

const database = Durable.layerConfig({ migrate: true }).pipe(Layer.provideMerge(DevDatabase.layerDatabaseUrl()))
await Effect.runPromise(main.pipe(Effect.provide(database)))
