// Scenario 4: first observations through the mutation ledger, each `decide` inserting a
// business row and enqueuing one message, against the same two statements in a plain
// transaction (the ratio is the ledger's overhead); then exact replays of every first.
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { formatRate, median } from "../common.js"
import * as EffectDurable from "../contenders/effectDurable.js"
import { alternate, type Bench, progress } from "../harness.js"

export const CONCURRENCY = 16

export interface LedgerResult {
  readonly plainRate: number
  readonly firstRate: number
  readonly replayRate: number
  readonly rounds: ReadonlyArray<{ plainRate: number; firstRate: number; replayRate: number }>
}

const order = (i: number) => ({ customer: `customer-${i % 1000}`, sku: "SKU-0001", cents: 100 + i })

/** The business effect: one row of the caller's table and one outbox message, in the caller's transaction. */
const placeOrder = (i: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const outbox = yield* Outbox.Outbox
    const { cents, customer, sku } = order(i)
    const [row] = yield* sql<
      { id: string }
    >`INSERT INTO orders (customer, sku, cents) VALUES (${customer}, ${sku}, ${cents}) RETURNING id::text AS id`
    yield* outbox.enqueue("order-placed", { orderId: row!.id, customer, sku, cents })
    return row!.id
  })

/** How long `effect` took, in seconds (live clock). */
const seconds = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.timed(effect), ([took]) => Duration.toSeconds(took))

interface Round {
  readonly rate: number
  readonly replayRate?: number
}

export const run = async (bench: Bench, observations: number): Promise<LedgerResult> => {
  const indices = Array.from({ length: observations }, (_, i) => i)
  const all = <A, E, R>(each: (i: number) => Effect.Effect<A, E, R>) =>
    seconds(Effect.forEach(indices, each, { concurrency: CONCURRENCY, discard: true }))
  const measure = async (mode: "plain" | "ledger", round: number, index: number): Promise<Round> => {
    const database = `bench_ledger_${index}`
    const url = await bench.freshDatabase(database)
    await bench.execute(
      url,
      "CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL, sku text NOT NULL, cents int NOT NULL)"
    )
    const result = await EffectDurable.run(
      url,
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        if (mode === "plain") return { rate: observations / (yield* all((i) => sql.withTransaction(placeOrder(i)))) }
        const ledger = yield* MutationLedger.MutationLedger
        const fingerprints = yield* Effect.forEach(indices, (i) => Fingerprint.fingerprint(order(i)))
        const observe = (expected: MutationLedger.MutationOutcome["_tag"]) => (i: number) =>
          ledger.execute(
            { subject: "bench", operation: "place-order", key: `order-${i}` },
            { kind: "place-order", eligibility: new Uint8Array(), fingerprint: fingerprints[i]! },
            Effect.map(placeOrder(i), (orderId) => MutationLedger.accept({ orderId }))
          ).pipe(
            Effect.filterOrFail((outcome) => outcome._tag === expected, () => new Error(`expected ${expected}`)),
            Effect.orDie
          )
        const first = yield* all(observe("First"))
        const replay = yield* all(observe("Replay"))
        return { rate: observations / first, replayRate: observations / replay }
      }),
      CONCURRENCY
    )
    await bench.dropDatabase(database)
    const replays = result.replayRate === undefined ? "" : `  replays ${formatRate(result.replayRate)} /s`
    progress(
      round,
      mode === "plain" ? "plain transaction" : "mutation ledger",
      `${formatRate(result.rate).padStart(7)} /s${replays}`
    )
    return result
  }
  const [plain, ledger] = await alternate(bench, ["plain", "ledger"] as const, measure)
  return {
    plainRate: median(plain!.map((r) => r.rate)),
    firstRate: median(ledger!.map((r) => r.rate)),
    replayRate: median(ledger!.map((r) => r.replayRate!)),
    rounds: plain!.map((p, i) => ({
      plainRate: p.rate,
      firstRate: ledger![i]!.rate,
      replayRate: ledger![i]!.replayRate!
    }))
  }
}
