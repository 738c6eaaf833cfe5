/**
 * The workflow schedule's producer: starts `workflows` orders over the production window,
 * each in a transaction with its business row (`chaos.wf_orders`), through the
 * commit-cutting proxy. A seeded share is rolled back on purpose after the start (then
 * recorded in a transaction of its own); a start that fails for any other reason (a cut
 * COMMIT, a terminated backend, a restart) is retried with the same order id: the business
 * row and the start are both idempotent. 0.2-2 s after a start committed it completes the
 * order's approval deferred, from this process (an engine with `runs: false`: it runs
 * nothing). Every answer goes to the journal. Run by main.ts as
 * `node dist/workflows/producer.js <config JSON> <run dir>`.
 */
import * as Durable from "@effect-durable/pg/Durable"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import { appendFileSync } from "node:fs"
import type { ProducerConfig } from "../producer.js"
import { rollsBack } from "../random.js"
import { APPLICATION } from "../schema.js"
import { approvalOf, Approved, ChaosOrder, type JournalEntry, layer } from "./schema.js"

const config: ProducerConfig = JSON.parse(process.argv[2]!)

class DeliberateRollback extends Data.TaggedError("DeliberateRollback")<{}> {}

const journal = (entry: JournalEntry) => appendFileSync(config.journal, `${JSON.stringify(entry)}\n`)
const describe = (cause: Cause.Cause<unknown>) => Cause.pretty(cause).split("\n")[0]!.slice(0, 200)

/** Retries `effect` until it succeeds (or fails with what `stop` accepts); the failures seen. */
const untilDone = <A, E, R>(effect: Effect.Effect<A, E, R>, stop: (cause: Cause.Cause<E>) => boolean = () => false) =>
  Effect.gen(function*() {
    const errors: Array<string> = []
    let retries = 0
    while (true) {
      const exit = yield* Effect.exit(effect)
      if (Exit.isSuccess(exit)) return { exit, retries, errors }
      if (stop(exit.cause)) return { exit, retries, errors }
      retries++
      if (errors.length < 3) errors.push(describe(exit.cause))
      yield* Effect.sleep(Duration.millis(Math.min(2_000, 50 * 2 ** Math.min(retries, 6))))
    }
  })

const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const started = Date.now()
  const spacing = config.productionMillis / config.messages

  const order = (index: number) =>
    Effect.gen(function*() {
      const orderId = `order-${index}`
      const rollback = rollsBack(config.seed, index, config.rollbackShare)
      const start = sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO chaos.wf_orders (order_id) VALUES (${orderId}) ON CONFLICT DO NOTHING`
        yield* ChaosOrder.execute({ orderId }, { discard: true })
        if (rollback) return yield* new DeliberateRollback()
      }))
      const startOutcome = yield* untilDone(
        start,
        (cause) => {
          const error = Cause.findErrorOption(cause)
          return error._tag === "Some" && error.value instanceof DeliberateRollback
        }
      )
      if (Exit.isFailure(startOutcome.exit)) {
        const recorded = yield* untilDone(sql`INSERT INTO chaos.wf_rolled_back (order_id) VALUES (${orderId})`)
        return journal({
          orderId,
          outcome: "RolledBack",
          retries: startOutcome.retries + recorded.retries,
          errors: [...startOutcome.errors, ...recorded.errors],
          at: Date.now()
        })
      }
      journal({
        orderId,
        outcome: "Started",
        retries: startOutcome.retries,
        errors: startOutcome.errors,
        at: Date.now()
      })
      yield* Effect.sleep(Duration.millis(200 + Math.random() * 1_800))
      const executionId = yield* ChaosOrder.executionId({ orderId })
      const token = DurableDeferred.tokenFromExecutionId(Approved, { workflow: ChaosOrder, executionId })
      const approved = yield* untilDone(DurableDeferred.succeed(Approved, { token, value: approvalOf(orderId) }))
      journal({ orderId, outcome: "Approved", retries: approved.retries, errors: approved.errors, at: Date.now() })
    }).pipe(Effect.delay(Duration.millis(Math.max(0, started + index * spacing - Date.now()))))

  yield* Effect.forEach(
    Array.from({ length: config.messages }, (_, index) => index),
    (index) => Effect.suspend(() => order(index)),
    { concurrency: config.concurrency, discard: true }
  )
})

program.pipe(
  Effect.provide(
    layer("producer").pipe(
      Layer.provideMerge(PgWorkflowEngine.layer({ runs: false })),
      Layer.provideMerge(Durable.layer({
        connection: {
          url: Redacted.make(config.url),
          applicationName: APPLICATION.producer,
          poolSize: config.concurrency,
          preparedStatements: !config.pooled
        }
      }))
    )
  ),
  Effect.tapCause((cause) => Effect.logError("chaos workflow producer failed", cause)),
  NodeRuntime.runMain
)
