/**
 * The producer process: commits `messages` commands through the public API over the
 * production window, in waves: every 10 s, half of the period's commands in its first second
 * (a backlog the workers claim in large batches), the other half spread over the rest. Each command goes through `MutationLedger.execute`, whose decide inserts
 * a business row and enqueues one outbox message carrying the command's uid. A seeded share
 * is rolled back on purpose after the enqueue; those uids are then recorded in a transaction
 * of their own. A command that fails for any other reason (a connection cut at COMMIT, a
 * terminated backend, a restart) is retried with the same idempotency key until the ledger
 * answers: First (the earlier attempt did not commit) or Replay (it did).
 *
 * Every answer is appended to the journal, a file that survives whatever the database loses:
 * the checker holds the database to it. Run by main.ts as
 * `node dist/producer.js <config JSON> <run dir>`; exits 0 when every command is answered.
 */
import { fingerprint } from "@effect-durable/core/Fingerprint"
import * as Durable from "@effect-durable/pg/Durable"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Predicate from "effect/Predicate"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { appendFileSync } from "node:fs"
import { rollsBack } from "./random.js"
import { APPLICATION, type JournalEntry, OPERATION, orderingKeyOf, type Payload, SUBJECT, TOPIC } from "./schema.js"

export interface ProducerConfig {
  /** Through the commit-cutting proxy. */
  readonly url: string
  /** Behind PgBouncer (transaction mode): statements are not prepared. */
  readonly pooled: boolean
  readonly messages: number
  readonly productionMillis: number
  readonly concurrency: number
  readonly rollbackShare: number
  readonly seed: number
  readonly journal: string
  /** Spread the messages over this many groups (`--limits`); none when absent. */
  readonly groups?: number
}

const config: ProducerConfig = JSON.parse(process.argv[2]!)

/** The failure decide returns on purpose, after its writes and its enqueue. */
class DeliberateRollback extends Data.TaggedError("DeliberateRollback")<{ readonly uid: string }> {}

const journal = (entry: JournalEntry) => appendFileSync(config.journal, `${JSON.stringify(entry)}\n`)

const describe = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.squash(cause)
  const text = failure instanceof Error
    ? `${failure.name}: ${failure.message}`
    : Predicate.hasProperty(failure, "_tag")
    ? `${String(failure._tag)}: ${Cause.pretty(cause).split("\n")[0]}`
    : Cause.pretty(cause)
  return text.slice(0, 200)
}

const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const ledger = yield* MutationLedger.MutationLedger
  const outbox = yield* Outbox.Outbox
  const started = Date.now()
  const PERIOD = 10_000
  const perPeriod = Math.max(2, Math.round((config.messages * PERIOD) / config.productionMillis))
  const burst = Math.floor(perPeriod / 2)
  /** When command `index` may start, ms after the start. */
  const slot = (index: number) => {
    const period = Math.floor(index / perPeriod)
    const position = index % perPeriod
    return period * PERIOD +
      (position < burst
        ? (position / burst) * 1_000
        : 1_000 + ((position - burst) / (perPeriod - burst)) * (PERIOD - 1_000))
  }

  const command = (index: number) =>
    Effect.gen(function*() {
      const key = `order-${index}`
      const uid = `msg-${index}`
      const rollback = rollsBack(config.seed, index, config.rollbackShare)
      const request = { kind: "order", eligibility: new Uint8Array(0), fingerprint: yield* fingerprint({ key, uid }) }
      const decide = Effect.gen(function*() {
        yield* sql`INSERT INTO chaos.orders (key, uid) VALUES (${key}, ${uid})`
        // Every other command of a customer is keyed: per-key order is checked under the faults too.
        const orderingKey = orderingKeyOf(index)
        yield* outbox.enqueue(
          TOPIC,
          { uid, key } satisfies Payload,
          {
            ...(orderingKey === undefined ? {} : { orderingKey }),
            ...(config.groups === undefined ? {} : { group: `group-${index % config.groups}` })
          }
        )
        if (rollback) return yield* new DeliberateRollback({ uid })
        return MutationLedger.accept({ uid })
      })
      const errors: Array<string> = []
      let retries = 0
      const failed = (cause: Cause.Cause<unknown>) =>
        Effect.gen(function*() {
          retries++
          if (errors.length < 3) errors.push(describe(cause))
          yield* Effect.sleep(Duration.millis(Math.min(2_000, 50 * 2 ** Math.min(retries, 6))))
        })
      while (true) {
        const exit = yield* Effect.exit(
          ledger.execute({ subject: SUBJECT, operation: OPERATION, key }, request, decide)
        )
        if (Exit.isSuccess(exit)) {
          return journal({ key, uid, outcome: exit.value._tag, retries, errors, at: Date.now() })
        }
        const failure = Cause.findErrorOption(exit.cause)
        if (failure._tag === "Some" && failure.value instanceof DeliberateRollback) break
        if (failure._tag === "Some" && failure.value._tag === "MutationConflict") {
          // The same key with the same request can never conflict: that is a bug to report.
          return yield* Effect.die(new Error(`${key}: ${describe(exit.cause)}`))
        }
        yield* failed(exit.cause)
      }
      // Rolled back: recorded on its own, retried until it is, before the answer is journaled.
      while (true) {
        const exit = yield* Effect.exit(sql`INSERT INTO chaos.rolled_back (uid) VALUES (${uid})`)
        if (Exit.isSuccess(exit)) return journal({ key, uid, outcome: "RolledBack", retries, errors, at: Date.now() })
        yield* failed(exit.cause)
      }
    }).pipe(
      Effect.delay(Duration.millis(Math.max(0, started + slot(index) - Date.now())))
    )

  yield* Effect.forEach(
    Array.from({ length: config.messages }, (_, index) => index),
    (index) => Effect.suspend(() => command(index)),
    { concurrency: config.concurrency, discard: true }
  )
})

program.pipe(
  Effect.provide(Durable.layer({
    connection: {
      url: Redacted.make(config.url),
      applicationName: APPLICATION.producer,
      poolSize: config.concurrency,
      preparedStatements: !config.pooled
    }
  })),
  Effect.tapCause((cause) => Effect.logError("chaos producer failed", cause)),
  NodeRuntime.runMain
)
