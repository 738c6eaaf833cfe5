// A net under every public operation of the substrate: any argument — hostile strings, numbers
// that are not numbers, durations that are not durations, JSON too deep, too wide or cyclic —
// gives a success or a typed failure, never a defect; inside a caller's transaction a failure
// writes nothing and leaves the transaction usable. Runs a few seconds in `npm test`;
// EFFECT_DURABLE_PROPERTY_RUNS raises the count (CI runs more).
import * as Cursor from "@effect-durable/core/Cursor"
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as RateLimiter from "effect/persistence/RateLimiter"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import * as Stream from "effect/Stream"
import * as FastCheck from "fast-check"
import * as Cas from "../src/Cas.js"
import * as FlowControl from "../src/FlowControl.js"
import * as Inbox from "../src/Inbox.js"
import * as InboxAdmin from "../src/InboxAdmin.js"
import * as InboxWorker from "../src/InboxWorker.js"
import * as Keyset from "../src/Keyset.js"
import * as MutationLedger from "../src/MutationLedger.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxBulk from "../src/OutboxBulk.js"
import * as OutboxStatements from "../src/OutboxStatements.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import * as RateLimiterStore from "../src/RateLimiterStore.js"
import * as Schedules from "../src/Schedules.js"
import * as Transactions from "../src/Transactions.js"

import { anything, claim, duration, json, number, optionalBag, queueOperations, RUNS, text, TYPED } from "./hostile.js"

type Services =
  | SqlClient.SqlClient
  | Outbox.Outbox
  | OutboxStatements.OutboxStatements
  | OutboxWorker.OutboxWorker
  | OutboxAdmin.OutboxAdmin
  | Inbox.Inbox
  | InboxWorker.InboxWorker
  | InboxAdmin.InboxAdmin
  | MutationLedger.MutationLedger
  | Cas.Cas
  | Keyset.Keyset
  | FlowControl.FlowControl
  | Schedules.Schedules
  | OutboxBulk.OutboxBulk
  | RateLimiter.RateLimiterStore

interface Operation {
  readonly name: string
  readonly run: Effect.Effect<unknown, unknown, Services>
  /** Operations that reach a caller-named table may fail in the database (an unknown table). */
  readonly mayReachDatabase?: boolean
}

const operations = FastCheck.oneof<Array<FastCheck.Arbitrary<Operation>>>(
  ...queueOperations,
  FastCheck.tuple(
    text,
    anything,
    optionalBag(FastCheck.dictionary(text, anything, { maxKeys: 3 })),
    FastCheck.boolean()
  )
    .map(([topic, payload, options, wrote]) => ({
      name: "enqueueAfter",
      run: Effect.flatMap(
        Effect.all([OutboxStatements.OutboxStatements, SqlClient.SqlClient]),
        ([statements, sql]) =>
          statements.enqueueAfter(
            wrote ? sql`SELECT 1` : sql`SELECT 1 WHERE false`,
            { topic, payload, options } as never
          )
      )
    })),
  claim.map((held) => ({
    name: "whileHolding",
    run: Effect.flatMap(
      Effect.all([OutboxStatements.OutboxStatements, SqlClient.SqlClient]),
      ([statements, sql]) => statements.whileHolding(held as never, (condition) => sql`SELECT 1 WHERE ${condition}`)
    )
  })),
  FastCheck.tuple(optionalBag(text), number, optionalBag(text)).map(([topic, limit, before]) => ({
    name: "deadLetters",
    run: Effect.flatMap(OutboxAdmin.OutboxAdmin, (o) => o.deadLetters({ topic, limit, before } as never))
  })),
  FastCheck.tuple(
    FastCheck.constantFrom("redrive" as const, "discard" as const, "replay" as const, "retryNow" as const),
    FastCheck.array(anything, { maxLength: 3 })
  ).map((
    [action, ids]
  ) => ({
    name: action,
    run: Effect.flatMap(OutboxAdmin.OutboxAdmin, (o) => o[action](ids as Array<string>))
  })),
  FastCheck.tuple(FastCheck.array(anything, { maxLength: 3 }), anything).map(([ids, reason]) => ({
    name: "moveAside",
    run: Effect.flatMap(OutboxAdmin.OutboxAdmin, (o) => o.moveAside(ids as Array<string>, { reason } as never))
  })),
  FastCheck.tuple(duration, anything).map(([olderThan, batchSize]) => ({
    name: "purge",
    run: Effect.flatMap(OutboxAdmin.OutboxAdmin, (o) => o.purge({ olderThan, batchSize } as never))
  })),
  FastCheck.tuple(text, anything, anything, optionalBag(anything), anything).map((
    [topic, maxInFlight, groupMaxInFlight, by, group]
  ) => ({
    name: "flow limits",
    run: Effect.flatMap(FlowControl.FlowControl, (flow) =>
      Effect.ensuring(
        Effect.andThen(
          flow.setLimit(topic, { maxInFlight, groupMaxInFlight, by } as never),
          flow.setGroup(topic, group as never, { maxInFlight: groupMaxInFlight, weight: maxInFlight } as never)
        ),
        Effect.ignore(flow.clear(topic))
      ))
  })),
  FastCheck.tuple(
    text,
    FastCheck.oneof(anything, FastCheck.record({ limit: anything, per: duration, burst: anything })),
    anything,
    text
  ).map(([topic, rate, groupRate, group]) => ({
    name: "flow rates",
    run: Effect.flatMap(FlowControl.FlowControl, (flow) =>
      Effect.ensuring(
        Effect.andThen(
          flow.setLimit(topic, { rate, groupRate } as never),
          Effect.andThen(
            flow.setGroup(topic, group, { rate: groupRate } as never),
            Effect.flatMap(OutboxWorker.OutboxWorker, (o) => o.rateWait([topic]))
          )
        ),
        Effect.ignore(flow.clear(topic))
      ))
  })),
  FastCheck.tuple(anything).map(([topics]) => ({
    name: "rateWait",
    run: Effect.flatMap(OutboxWorker.OutboxWorker, (o) => o.rateWait(topics as never))
  })),
  FastCheck.tuple(text, json, anything).map(([topic, payload, group]) => ({
    name: "enqueue in a group",
    run: Effect.flatMap(Outbox.Outbox, (o) => o.enqueue(topic, payload, { group } as never))
  })),
  FastCheck.tuple(text, optionalBag(text)).map(([topic, by]) => ({
    name: "pause",
    run: Effect.flatMap(
      OutboxAdmin.OutboxAdmin,
      (o) => Effect.andThen(o.pause(topic, { by } as never), o.resume(topic))
    )
  })),
  FastCheck.tuple(text, text, text, text, json, FastCheck.boolean()).map((
    [subject, operation, key, kind, response, wait]
  ) => ({
    name: "ledger.execute",
    run: Effect.flatMap(
      MutationLedger.MutationLedger,
      (l) =>
        Effect.flatMap(Fingerprint.fingerprint({ n: 1 }), (fingerprint) =>
          l.execute(
            { subject, operation, key },
            { kind, eligibility: new Uint8Array(), fingerprint },
            Effect.succeed(MutationLedger.accept(response)),
            {
              wait
            }
          ))
    )
  })),
  FastCheck.tuple(duration, anything).map(([olderThan, batchSize]) => ({
    name: "ledger.purge",
    run: Effect.flatMap(MutationLedger.MutationLedger, (l) => l.purge({ olderThan, batchSize } as never))
  })),
  FastCheck.tuple(text, text).map(([consumer, messageId]) => ({
    name: "inbox.handle",
    run: Effect.flatMap(Inbox.Inbox, (i) => i.handle(consumer, messageId, Effect.void))
  })),
  FastCheck.tuple(text, text, json, anything).map(([consumer, messageId, payload, headers]) => ({
    name: "inbox.receive",
    run: Effect.flatMap(Inbox.Inbox, (i) => i.receive(consumer, messageId, payload, headers as never))
  })),
  FastCheck.tuple(text, anything, anything, FastCheck.dictionary(text, anything, { maxKeys: 2 })).map((
    [table, id, expectedRevision, set]
  ) => ({
    name: "cas.update",
    mayReachDatabase: true,
    run: Effect.flatMap(Cas.Cas, (c) => c.update({ table, id, expectedRevision, set } as never))
  })),
  FastCheck.tuple(text, text, number, optionalBag(text), anything).map(([table, subject, limit, cursor, where]) => ({
    name: "keyset.page",
    mayReachDatabase: true,
    run: Effect.flatMap(Keyset.Keyset, (k) => k.page({ table, subject, limit, cursor, where } as never))
  })),
  FastCheck.tuple(text, text, anything).map(([namespace, key, wait]) => ({
    name: "advisoryLock",
    run: Transactions.advisoryLock(namespace, key, { wait } as never)
  })),
  // The surfaces of the last wave (issue 42): cancel and restore, bulk actions by filter, inbox
  // limits, schedules, the rate limiter store.
  FastCheck.tuple(FastCheck.array(anything, { maxLength: 3 }), anything, anything).map(([ids, reason, by]) => ({
    name: "cancel, restore",
    run: Effect.flatMap(
      OutboxAdmin.OutboxAdmin,
      (o) => Effect.andThen(o.cancel(ids as Array<string>, { reason, by } as never), o.restore(ids as Array<string>))
    )
  })),
  FastCheck.tuple(
    FastCheck.oneof(
      anything,
      FastCheck.record({ topic: anything, state: anything, olderThan: duration, ids: anything })
    ),
    anything,
    FastCheck.constantFrom("redriveMatching" as const, "discardMatching" as const)
  ).map(([filter, options, action]) => ({
    name: action,
    run: Effect.flatMap(OutboxBulk.OutboxBulk, (b) => Stream.runDrain(b[action](filter as never, options as never)))
  })),
  FastCheck.tuple(text, anything, anything, optionalBag(anything)).map(([consumer, maxInFlight, rate, by]) => ({
    name: "inbox limits",
    run: Effect.flatMap(FlowControl.FlowControl, (flow) =>
      Effect.ensuring(
        Effect.andThen(flow.setInboxLimit(consumer, { maxInFlight, rate, by } as never), flow.inboxLimits),
        Effect.ignore(flow.clearInbox(consumer))
      ))
  })),
  FastCheck.tuple(
    text,
    FastCheck.oneof(text, FastCheck.constantFrom("* * * * *", "0 0 30 2 *", "*/5 * * * * *", "0 3 * * 1-5")),
    FastCheck.oneof(text, FastCheck.constantFrom("UTC", "Europe/Berlin", "Mars/Olympus")),
    text,
    json,
    FastCheck.record({ overlap: anything, catchUp: duration, orderingKey: anything }),
    FastCheck.tuple(anything, anything)
  ).map(([name, cron, timeZone, topic, payload, rest, [from, to]]) => ({
    name: "schedules",
    run: Effect.flatMap(Schedules.Schedules, (sched) =>
      Effect.ensuring(
        Effect.gen(function*() {
          yield* sched.define({ name, cron, timeZone, topic, payload, ...rest } as never)
          yield* sched.pause(name, { by: topic } as never)
          yield* sched.resume(name)
          yield* sched.backfill(name, { from, to } as never)
          yield* sched.list
        }),
        Effect.ignore(sched.remove(name))
      ))
  })),
  FastCheck.tuple(anything, anything, anything, anything, anything, anything).map((
    [key, tokens, limit, refill, epoch, overflow]
  ) => ({
    name: "rate limiter store",
    run: Effect.flatMap(RateLimiter.RateLimiterStore, (store) =>
      Effect.gen(function*() {
        const refillRate = typeof refill === "number" ? Duration.millis(refill) : Duration.seconds(1)
        yield* store.fixedWindow({ key, tokens, refillRate, limit } as never)
        yield* store.tokenBucket({ key, tokens, limit, refillRate, allowOverflow: overflow } as never)
        yield* store.adaptiveConsume({ key, tokens, fallbackWindow: refillRate } as never)
        yield* store.adaptiveFeedback({ key, tokens, epoch, status: 429, retryAfter: refillRate } as never)
      }))
  }))
)

/** What a typed failure looks like: one of the substrate's tagged errors. */

const rowCounts = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ outbox: number; inbox: number; ledger: number }>`
    SELECT (SELECT count(*)::int FROM durable.outbox_messages) AS outbox, (SELECT count(*)::int FROM durable.inbox) AS inbox,
           (SELECT count(*)::int FROM durable.mutation_records) AS ledger`)

const Live = Layer.mergeAll(
  Keyset.layer.pipe(Layer.provide(Cursor.layer([{ id: "k1", secret: Redacted.make("property-test-secret-16+") }]))),
  Schedules.layer,
  OutboxBulk.layer,
  Layer.effect(RateLimiter.RateLimiterStore, RateLimiterStore.make()).pipe(Layer.orDie)
).pipe(Layer.provideMerge(TestSubstrate.layer()))

describe("every public operation, any argument", () => {
  it.layer(Live, { timeout: "5 minutes" })((it) => {
    it.effect("succeeds or fails typed, never a defect; inside a caller's transaction a failure writes nothing and the transaction stays usable", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const context = yield* Effect.context<Services>()
        const check = (ops: ReadonlyArray<Operation>, inTransaction: boolean) =>
          Effect.runPromise(Effect.provide(
            Effect.gen(function*() {
              const body = Effect.gen(function*() {
                for (const op of ops) {
                  const before = yield* rowCounts
                  const exit = yield* Effect.exit(op.run)
                  if (Exit.isFailure(exit)) {
                    expect(Cause.hasDies(exit.cause), `${op.name} died: ${Cause.pretty(exit.cause)}`).toBe(false)
                    const failure = Cause.findErrorOption(exit.cause)
                    const tag = failure._tag === "Some" ? (failure.value as { _tag?: string })._tag : undefined
                    const allowed = TYPED.has(tag ?? "") || (tag === "DatabaseError" && op.mayReachDatabase === true)
                    expect(allowed, `${op.name} failed with ${tag}: ${Cause.pretty(exit.cause)}`).toBe(true)
                    // Nothing half-written, and the transaction still answers.
                    expect(yield* rowCounts, op.name).toEqual(before)
                    expect(yield* sql`SELECT 1 AS one`).toEqual([{ one: 1 }])
                  }
                }
              })
              // The caller's transaction is rolled back at the end: the property runs leave no rows.
              yield* inTransaction
                ? Effect.flip(sql.withTransaction(Effect.andThen(body, Effect.fail("rollback" as const))))
                : body
            }),
            context
          ))
        yield* Effect.promise(() =>
          FastCheck.assert(
            FastCheck.asyncProperty(
              FastCheck.array(operations, { minLength: 1, maxLength: 4 }),
              FastCheck.boolean(),
              check
            ),
            { numRuns: RUNS }
          )
        )
      }))
  })
})
