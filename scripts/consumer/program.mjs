// The consumer test's program: what an application does with the published packages, run
// by plain `node` in a project outside the workspace (scripts/consumer-test.sh).
// 1. every public module of every package loads from dist; internal/ modules are sealed;
// 2. against DATABASE_URL, or the development database when it is not set: a command
//    through the ledger enqueues a message in its transaction, its retry is replayed, and
//    the projector delivers the one message exactly once.
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as DevDatabase from "@effect-durable/embedded/DevDatabase"
import * as Durable from "@effect-durable/pg/Durable"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect, Layer, Ref, Schedule } from "effect"
import assert from "node:assert/strict"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"

const PACKAGES = ["core", "embedded", "pg", "projector", "nats", "http", "testing"]

// 1. Every module the exports map offers, and nothing under internal/.
let modules = 0
for (const name of PACKAGES) {
  const root = join(process.cwd(), "node_modules", "@effect-durable", name)
  const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"))
  assert.equal(manifest.exports["./internal/*"], null, `${name} seals internal/`)
  for (const file of readdirSync(join(root, "dist")).filter((f) => f.endsWith(".js"))) {
    // Loads (a module of types only, such as pg/LeasedQueue, has no runtime exports).
    await import(`@effect-durable/${name}/${file.slice(0, -3)}`)
    modules++
  }
  const internal = existsSync(join(root, "dist", "internal"))
    ? readdirSync(join(root, "dist", "internal")).find((f) => f.endsWith(".js"))
    : undefined
  if (internal !== undefined) {
    await assert.rejects(import(`@effect-durable/${name}/internal/${internal.slice(0, -3)}`), { code: "ERR_PACKAGE_PATH_NOT_EXPORTED" })
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
        const [row] = yield* sql`INSERT INTO ${sql(schema)}.orders (sku, qty) VALUES (${order.sku}, ${order.qty}) RETURNING id`
        yield* outbox.enqueue("order-placed", { orderId: row.id, ...order })
        return MutationLedger.accept({ orderId: row.id })
      })
    )
  })

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
  yield* sql`DROP SCHEMA ${sql(schema)} CASCADE`
  console.log(`consumer: ledger First then Replay, one message delivered by the projector (schema ${schema})`)
}).pipe(Effect.scoped)

const database = Durable.layerConfig({ migrate: true }).pipe(Layer.provide(DevDatabase.layerDatabaseUrl()))
await Effect.runPromise(main.pipe(Effect.provide(database)))
