/**
 * `npm start`: a small order service on a real PostgreSQL, through the public Layers.
 *
 * 1. PostgreSQL: DATABASE_URL when set, else the development database (an embedded server
 *    whose data stays in .effect-durable/postgres: each run finds the orders of the last).
 * 2. `Durable.layerConfig` builds the client and the substrate and runs the migrations.
 * 3. The projector runs as a fiber and delivers outbox messages to a log publisher (to NATS
 *    JetStream when NATS_URL is set).
 * 4. Commands go through the mutation ledger; each accepted one enqueues its message in
 *    the same transaction: a first request, an exact retry (replayed), a conflicting retry,
 *    a rejection, and a transaction that fails after enqueuing (nothing is delivered).
 * 5. It waits until every committed message is delivered, prints the counts, shuts down.
 * Idempotency keys carry the run's number, so every run tells the same story.
 */
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as JetStreamPublisher from "@effect-durable/nats/JetStreamPublisher"
import * as Nats from "@effect-durable/nats/Nats"
import * as Durable from "@effect-durable/pg/Durable"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as DevDatabase from "@effect-durable/embedded/DevDatabase"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"

const started = Date.now()
const step = (text: string) => Console.log(`[${String(Date.now() - started).padStart(5)} ms] ${text}`)

interface Order {
  readonly sku: string
  readonly qty: number
}

/** The command handler: one order per idempotency key; its message commits with it. */
const placeOrder = (customer: string, idempotencyKey: string, order: Order) =>
  Effect.gen(function*() {
    const ledger = yield* MutationLedger.MutationLedger
    const outbox = yield* Outbox.Outbox
    const sql = yield* SqlClient.SqlClient
    return yield* ledger.execute(
      { subject: customer, operation: "place-order", key: idempotencyKey },
      { kind: "order", eligibility: new Uint8Array(), fingerprint: yield* Fingerprint.fingerprint(order) },
      Effect.gen(function*() {
        if (order.qty < 1) return MutationLedger.reject({ error: "quantity must be at least 1" })
        const [row] = yield* sql<{ id: number }>`
          INSERT INTO orders (customer, sku, qty) VALUES (${customer}, ${order.sku}, ${order.qty}) RETURNING id`
        yield* outbox.enqueue("order-placed", { orderId: row!.id, customer, ...order }, { orderingKey: customer })
        return MutationLedger.accept({ orderId: row!.id })
      })
    )
  })

const describeOutcome = (outcome: MutationLedger.MutationOutcome) =>
  `${outcome._tag} ${outcome.status} ${JSON.stringify(outcome.response)}`

const scenario = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const outbox = yield* Outbox.Outbox
  yield* sql`CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, customer text, sku text, qty int)`
  yield* sql`CREATE TABLE IF NOT EXISTS demo_runs (run serial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())`
  const [thisRun] = yield* sql<{ run: number }>`INSERT INTO demo_runs DEFAULT VALUES RETURNING run`
  const run = thisRun!.run
  const [before] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM orders`
  yield* step(`run #${run} on this database; orders from earlier runs: ${before!.n}`)
  const key = (name: string) => `run-${run}/${name}`

  yield* step("command 1: acme places order checkout-1 (2 x A-1)")
  yield* step(`  -> ${describeOutcome(yield* placeOrder("acme", key("checkout-1"), { sku: "A-1", qty: 2 }))}`)
  yield* step("command 2: the client retries checkout-1 exactly (lost response)")
  yield* step(`  -> ${describeOutcome(yield* placeOrder("acme", key("checkout-1"), { sku: "A-1", qty: 2 }))}`)
  yield* step("command 3: checkout-1 again, but with 5 x A-1")
  const conflict = yield* Effect.flip(placeOrder("acme", key("checkout-1"), { sku: "A-1", qty: 5 }))
  yield* step(`  -> ${conflict._tag}: ${conflict.message}`)
  yield* step("command 4: globex orders 0 x B-7 (rejected, and the rejection is recorded)")
  yield* step(`  -> ${describeOutcome(yield* placeOrder("globex", key("checkout-9"), { sku: "B-7", qty: 0 }))}`)
  yield* step("command 5: globex orders 3 x B-7")
  yield* step(`  -> ${describeOutcome(yield* placeOrder("globex", key("checkout-10"), { sku: "B-7", qty: 3 }))}`)
  yield* step("command 6: a transaction enqueues a message, then fails: nothing may be delivered")
  yield* Effect.flip(sql.withTransaction(
    Effect.zipRight(outbox.enqueue("order-placed", { orderId: -1, note: "never" }), Effect.fail("payment declined"))
  ))
  yield* step("  -> rolled back")

  yield* step("waiting for the projector to deliver every committed message...")
  yield* (yield* OutboxAdmin.OutboxAdmin).unprojectedCount("order-placed").pipe(
    Effect.repeat({ until: (n) => n === 0, schedule: Schedule.spaced("20 millis") })
  )
  const projector = yield* Projector.Projector
  // The rows are marked before the projector adds the batch to its counts: wait for both.
  yield* projector.counts.pipe(
    Effect.repeat({ until: (c) => c.delivered >= 2, schedule: Schedule.spaced("10 millis") })
  )
  const counts = yield* projector.counts
  yield* step(`projector ${projector.workerId}: ${JSON.stringify(counts)}`)
  const [orders] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM orders`
  yield* step(`orders in the database: ${orders!.n}, ${orders!.n - before!.n} from this run (two commands applied, a retry replayed, a conflict and a rejection refused)`)
})

/** Prints each delivery; stands in for a broker. */
const logPublisher = Publisher.layerHandler((message) =>
  step(`  delivered ${message.topic} #${message.id} (attempt ${message.attempt}): ${JSON.stringify(message.payload)}`)
)

const natsPublisher = (url: string) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const nats = yield* Nats.Nats
    yield* Effect.promise(() =>
      nats.manager.streams.add({ name: "ORDERS", subjects: ["order-placed"] }).catch(() => undefined)
    )
    return JetStreamPublisher.layer()
  })).pipe(Layer.provideMerge(Nats.layer({ servers: url })))

const program = Effect.gen(function*() {
  const databaseUrl = yield* Config.option(Config.redacted("DATABASE_URL"))
  const natsUrl = yield* Config.option(Config.string("NATS_URL"))
  yield* step(
    Option.isSome(databaseUrl) ? "PostgreSQL: DATABASE_URL" : "PostgreSQL: starting the development database (.effect-durable/postgres)..."
  )
  // DATABASE_URL when it is set; otherwise the development database, kept across runs.
  const substrate = Durable.layerConfig({ migrate: true }).pipe(Layer.provide(DevDatabase.layerDatabaseUrl()))
  const publisher = Option.isSome(natsUrl) ? natsPublisher(natsUrl.value) : logPublisher
  const projector = Projector.layer({ topics: ["order-placed"], pollInterval: "200 millis" }).pipe(Layer.provide(publisher))

  yield* Effect.gen(function*() {
    yield* step(`PostgreSQL ready; substrate migrated; projector running, publishing to ${
      Option.isSome(natsUrl) ? `NATS ${natsUrl.value}` : "the log"
    }`)
    yield* scenario
    yield* step("shutting down: the projector stops, the pool closes, the development database stops (its data stays)")
  }).pipe(Effect.provide(projector.pipe(Layer.provideMerge(substrate))))
  yield* step("done")
})

NodeRuntime.runMain(program)
