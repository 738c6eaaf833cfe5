// effect-durable: the outbox (enqueueMany in bulk, enqueue per transaction) drained by the
// projector with a no-op publisher.
import * as Durable from "@effect-durable/pg/Durable"
import type { SettingsInput } from "@effect-durable/pg/DurableConfig"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as QueueLifecycle from "@effect-durable/pg/QueueLifecycle"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as References from "effect/References"
import * as SqlClient from "effect/sql/SqlClient"
import {
  BULK_TRANSACTION,
  CALL_MILLIS,
  produceSteadily,
  type QueueContender,
  sleep,
  until,
  untilNoneOpen
} from "../common.js"

export const run = <A, E>(
  url: string,
  body: Effect.Effect<A, E, Durable.Services>,
  poolSize = 10,
  settings: SettingsInput = {}
) =>
  Effect.runPromise(body.pipe(
    Effect.provide(Durable.layer({ connection: { url: Redacted.make(url), poolSize }, settings, migrate: true })),
    Effect.scoped,
    Effect.provideService(References.MinimumLogLevel, "Warn")
  ))

const OPEN = `SELECT count(*) AS n FROM durable.outbox WHERE ${QueueLifecycle.outbox.open}`

/** Writes the messages `BULK_TRANSACTION` per `enqueueMany` (one statement, one transaction), message i with ordering key `keyOf(i)`. */
export const enqueueKeyed = (url: string, messages: ReadonlyArray<unknown>, keyOf: (i: number) => string | null) =>
  run(
    url,
    Effect.gen(function*() {
      const outbox = yield* Outbox.Outbox
      for (let start = 0; start < messages.length; start += BULK_TRANSACTION) {
        yield* outbox.enqueueMany(
          messages.slice(start, start + BULK_TRANSACTION).map((payload, j) => {
            const key = keyOf(start + j)
            return { topic: "bench", payload, ...(key === null ? {} : { options: { orderingKey: key } }) }
          })
        )
      }
    })
  )

/** Without ordering keys. */
export const enqueueBulk = (url: string, messages: ReadonlyArray<unknown>) => enqueueKeyed(url, messages, () => null)

export const make = (
  label: string,
  options: Projector.ProjectorOptions,
  poolSize = 10,
  settings: SettingsInput = {},
  /**
   * The handler of `drain`: how long each call takes (default: nothing, a no-op handler), and
   * whether it takes batches (`Publisher.layerBatchHandler`, up to `batch` messages a call).
   */
  handler: { readonly millisPerCall?: number; readonly batch?: number } = {}
): QueueContender => ({
  name: `effect-durable (${label})`,
  library: "effect-durable",
  settings: {
    batchSize: options.batchSize ?? 500,
    batchesInFlight: options.batchesInFlight ?? 3,
    concurrency: options.concurrency ?? 16,
    poolSize,
    ...(settings.synchronousWorkerCommits === false ? { synchronousWorkerCommits: false } : {})
  },
  enqueueBulk,
  enqueueKeyed,
  enqueueEach: (url, messages, producers) =>
    run(
      url,
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        yield* Effect.forEach(messages, (payload) => sql.withTransaction(outbox.enqueue("bench", payload)), {
          concurrency: producers,
          discard: true
        })
      }),
      producers
    ),
  drain: (url, count) => {
    let delivered = 0
    const millis = handler.millisPerCall ?? 0
    const call = (messages: number) =>
      millis === 0
        ? Effect.sync(() => void (delivered += messages))
        : Effect.andThen(Effect.sleep(millis), Effect.sync(() => void (delivered += messages)))
    const publisher = handler.batch === undefined
      ? Publisher.layerHandler(() => call(1))
      : Publisher.layerBatchHandler({ maxSize: handler.batch }, (messages) => call(messages.length))
    return run(
      url,
      Effect.promise(async () => {
        await until(() => delivered >= count)
        await untilNoneOpen(url, OPEN)
      }).pipe(Effect.provide(Projector.layer(options).pipe(Layer.provide(publisher)))),
      poolSize,
      settings
    )
  },
  steady: (url, count, rate) => {
    const received = new Map<number, number>()
    const handler = Publisher.layerHandler((message) =>
      Effect.sync(() => {
        const i = (message.payload as { i: number }).i
        if (!received.has(i)) received.set(i, performance.now())
      })
    )
    return run(
      url,
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const context = yield* Effect.context<SqlClient.SqlClient>()
        yield* Effect.promise(() => sleep(500)) // the listener connects
        const committed = yield* Effect.promise(() =>
          produceSteadily(
            count,
            rate,
            (i) =>
              Effect.runPromiseWith(context)(sql.withTransaction(outbox.enqueue("bench", { i }))).then(() => undefined)
          )
        )
        yield* Effect.promise(() => until(() => received.size >= count, 10))
        return { committed, received }
      }).pipe(Effect.provide(Projector.layer(options).pipe(Layer.provide(handler)))),
      poolSize,
      settings
    )
  }
})

export const defaults = make("default", {})
// The claim of 0.2: one message per ordering key per claim (perKey 1), the keys scenario's "before".
export const onePerKey = make("one per key per claim", { perKey: 1 })
export const tuned = make("tuned", { batchSize: 1000, batchesInFlight: 3 })
// The defaults, with the worker's claims, marks and renewals committing without waiting for
// the WAL flush (a lever of issue 16, not the default).
export const asyncCommits = make("async worker commits", {}, 10, { synchronousWorkerCommits: false })

// The limits scenario: the same projector, its deliveries taking 10 ms each (the limit, not the
// database, bounds them), with and without a topic limit set beforehand (see scenarios/limits.ts).
export const slowHandler = make("10 ms deliveries", {}, 10, {}, { millisPerCall: 10 })

// The batch scenario: a handler whose cost is per call (an API round trip), one message a call
// against batches of 100 (see scenarios/batches.ts).
export const perCallSingle = make(`${CALL_MILLIS} ms per call, one message a call`, {}, 10, {}, {
  millisPerCall: CALL_MILLIS
})
export const perCallBatch = make(`${CALL_MILLIS} ms per call, batch 100`, {}, 10, {}, {
  millisPerCall: CALL_MILLIS,
  batch: 100
})
