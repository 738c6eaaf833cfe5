// Effect 4's PersistedQueue on its SQL store (effect/persistence, the successor of Effect 3's
// SqlPersistedQueue), the Effect ecosystem's own durable queue: elements offered through
// PersistedQueue (no bulk API: `BULK_TRANSACTION` offers per transaction), taken by concurrent
// takers with a no-op handler. It has no LISTEN/NOTIFY: a taker finds work on its next poll.
import * as PgClient from "@effect/sql-pg/PgClient"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as PersistedQueue from "effect/persistence/PersistedQueue"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as SqlClient from "effect/sql/SqlClient"
import { BULK_TRANSACTION, type QueueContender, until, untilNoneOpen } from "../common.js"

const Element = Schema.Struct({
  orderId: Schema.Number,
  customer: Schema.String,
  sku: Schema.String,
  note: Schema.String
})

interface Settings {
  readonly takers: number
  readonly pollInterval: Duration.Input
}

const run = <A>(
  url: string,
  settings: Settings,
  body: Effect.Effect<A, unknown, PersistedQueue.PersistedQueueFactory | SqlClient.SqlClient | Scope.Scope>,
  poolSize = 10
) =>
  Effect.runPromise(
    body.pipe(
      Effect.provide(PersistedQueue.layer.pipe(
        Layer.provide(PersistedQueue.layerStoreSql({ pollInterval: settings.pollInterval })),
        Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: poolSize }))
      )),
      Effect.scoped
    ) as Effect.Effect<A>
  )

const OPEN = "SELECT count(*) AS n FROM effect_queue WHERE state = 'pending'"

export const make = (settings: Settings): QueueContender => ({
  name: "PersistedQueue",
  library: "effect/persistence PersistedQueue (SQL store)",
  settings: { ...settings },
  enqueueBulk: (url, messages) =>
    run(
      url,
      settings,
      Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "bench", schema: Element })
        const sql = yield* SqlClient.SqlClient
        for (let start = 0; start < messages.length; start += BULK_TRANSACTION) {
          yield* sql.withTransaction(
            Effect.forEach(messages.slice(start, start + BULK_TRANSACTION), (m) => queue.offer(m), { discard: true })
          )
        }
      })
    ),
  enqueueEach: (url, messages, producers) =>
    run(
      url,
      settings,
      Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "bench", schema: Element })
        yield* Effect.forEach(messages, (m) => queue.offer(m), { concurrency: producers, discard: true })
      }),
      producers
    ),
  drain: (url, count) =>
    run(
      url,
      settings,
      Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "bench", schema: Element })
        let delivered = 0
        // take fails with the handler's error once a retry is recorded: a taker keeps taking.
        const taker = queue.take(() => Effect.sync(() => void delivered++)).pipe(Effect.ignore, Effect.forever)
        yield* Effect.forkScoped(Effect.all(
          Array.from({ length: settings.takers }, () => taker),
          { concurrency: "unbounded" }
        ))
        yield* Effect.promise(async () => {
          await until(() => delivered >= count)
          await untilNoneOpen(url, OPEN)
        })
      })
    )
})

/**
 * 64 concurrent takers (each poll claims as many elements as takers wait: 16 drained at 60%
 * of this rate, 256 no faster), its shortest sensible poll.
 */
export const tuned = make({ takers: 64, pollInterval: "10 millis" })
