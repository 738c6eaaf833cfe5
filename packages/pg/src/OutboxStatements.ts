/**
 * The outbox joined to a statement of the caller's, for code that keeps its own tables beside it
 * (the workflow engine: an execution's row and its first run message; a run's settle under its
 * claim's fence). Each is one statement: atomic without a transaction of its own, one round trip,
 * in the caller's transaction when there is one. PostgreSQL only (the in-memory outbox has no
 * statements to join); `Durable.layer` provides it.
 *
 * @since 0.3.0
 */
import { type DatabaseError, type DurableConfigError, InvalidInput } from "@effect-durable/core/Errors"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import * as EnqueueSql from "./internal/queue/enqueueSql.js"
import * as Prepare from "./internal/queue/prepare.js"
import { specFor } from "./internal/queue/spec.js"
import * as QueueWorker from "./internal/queue/worker.js"
import type * as LeasedQueue from "./LeasedQueue.js"
import * as Outbox from "./Outbox.js"

/** A fenced write's outcome (`whileHolding`): whether the claim held, and the rows its write returned. */
export interface Fenced {
  readonly held: boolean
  /** The rows the write returned, as JSON (none when the claim no longer held). */
  readonly rows: ReadonlyArray<unknown>
}

export class OutboxStatements extends Context.Service<OutboxStatements, {
  /**
   * Runs `write` (a statement that returns rows: `INSERT … ON CONFLICT DO NOTHING RETURNING`,
   * an `UPDATE … RETURNING`) and, in the same statement, enqueues `message` iff `write` returned
   * a row. The message's id, or `undefined` when `write` returned nothing (and nothing was
   * enqueued). The message is checked as `Outbox.enqueue` checks it, before anything is written;
   * a dedup key is refused (`InvalidInput`): settling one may take more than one statement.
   */
  readonly enqueueAfter: (
    write: Statement.Fragment,
    message: Outbox.NewMessage
  ) => Effect.Effect<string | undefined, Outbox.EnqueueError>
  /**
   * Many `enqueueAfter`s in one statement: runs `write` (a statement returning a text column
   * `key`: `INSERT … ON CONFLICT DO NOTHING RETURNING …`) and enqueues each message whose `key`
   * `write` returned, in the order given. The keys `write` returned (their messages enqueued).
   * Keys are the caller's to keep distinct; the messages are checked as `Outbox.enqueueMany`
   * checks them (no dedup keys), before anything is written.
   */
  readonly enqueueEachAfter: (
    write: Statement.Fragment,
    messages: ReadonlyArray<{ readonly key: string; readonly message: Outbox.NewMessage }>
  ) => Effect.Effect<ReadonlyArray<string>, Outbox.EnqueueError>
  /**
   * Runs `write(held)` in one statement with the fence of a claim of the outbox: `held` is an
   * SQL condition for `write` to test, true iff `claim` still holds its message with its lease
   * running (the message's row locked until the transaction ends, as `OutboxWorker.holds` locks
   * it). A worker that lost its lease writes nothing, with no transaction of its own.
   */
  readonly whileHolding: (
    claim: LeasedQueue.Claim,
    write: (held: Statement.Fragment) => Statement.Fragment
  ) => Effect.Effect<Fenced, DatabaseError>
  /**
   * A subquery for the caller's statement: the open messages of ordering key `orderingKey` whose
   * topic starts with `topicPrefix` (both SQL expressions, which may name the caller's columns),
   * due for longer than `seconds` and held by no lease — columns `topic` and `available_at`. What
   * waits with nobody claiming it (a workflow run routed to a version no process serves).
   */
  readonly waitingUnclaimed: (options: {
    readonly orderingKey: Statement.Fragment
    readonly topicPrefix: Statement.Fragment
    readonly seconds: number
  }) => Statement.Fragment
  /**
   * Moves the open messages of `orderingKey` on topic `from`, or on a topic starting with
   * `fromPrefix`, that no lease holds, to topic `to` (a message a worker holds stays where it is);
   * how many. In the caller's transaction when there is one.
   */
  readonly moveTopic: (options: {
    readonly orderingKey: string
    readonly from: string
    readonly fromPrefix: string
    readonly to: string
  }) => Effect.Effect<number, DatabaseError>
}>()("@effect-durable/pg/OutboxStatements") {}

export const make = (
  options: Outbox.OutboxOptions = {}
): Effect.Effect<OutboxStatements["Service"], DurableConfigError, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const limits = yield* Outbox.decodeOptions(options)
    const prepare = Prepare.make(limits)
    const table = sql.literal(settings.table("outbox"))
    const channel = Outbox.channelFor(settings.schema)
    const queue = QueueWorker.make(sql, settings, specFor(settings, "outbox"), "OutboxStatements")

    const enqueueAfter = Effect.fn("OutboxStatements.enqueueAfter")(
      function*(write: Statement.Fragment, message: Outbox.NewMessage) {
        if (message.options?.dedupKey !== undefined) {
          return yield* new InvalidInput({
            argument: "options.dedupKey",
            rule: "an enqueue after a statement takes no dedup key (settling one may take more than one statement)"
          })
        }
        const row = yield* prepare(message.topic, message.payload, message.options ?? {}, yield* Prepare.traceparent)
        const rows = yield* classifySqlErrors("OutboxStatements.enqueueAfter")(
          EnqueueSql.insert(sql, table, channel, row, write)
        )
        return rows[0]?.id
      }
    )

    const prepareMany = Prepare.many(limits)
    const enqueueEachAfter = Effect.fn("OutboxStatements.enqueueEachAfter")(
      function*(
        write: Statement.Fragment,
        messages: ReadonlyArray<{ readonly key: string; readonly message: Outbox.NewMessage }>
      ) {
        if (messages.length === 0) return []
        const rows = yield* prepareMany(messages.map((m) => m.message), yield* Prepare.traceparent)
        const written = yield* classifySqlErrors("OutboxStatements.enqueueEachAfter")(
          EnqueueSql.insertMany(sql, table, channel, rows, { write, keys: messages.map((m) => m.key) })
        )
        return written.map((row) => row.id)
      }
    )

    return OutboxStatements.of({
      enqueueAfter,
      enqueueEachAfter,
      waitingUnclaimed: ({ orderingKey, seconds, topicPrefix }) =>
        sql`SELECT o.topic, o.available_at FROM ${table} o
             WHERE o.ordering_key = ${orderingKey} AND starts_with(o.topic, ${topicPrefix})
               AND o.projected_at IS NULL AND o.dead_at IS NULL
               AND o.available_at < now() - make_interval(secs => ${seconds})
               AND (o.claimed_until IS NULL OR o.claimed_until < now())`,
      moveTopic: ({ from, fromPrefix, orderingKey, to }) =>
        sql<{ n: number }>`
          WITH moved AS (
            UPDATE ${table} SET topic = ${to}
             WHERE ordering_key = ${orderingKey} AND (topic = ${from} OR starts_with(topic, ${fromPrefix}))
               AND projected_at IS NULL AND dead_at IS NULL
               AND (claimed_until IS NULL OR claimed_until < now())
            RETURNING 1)
          SELECT count(*)::int AS n FROM moved`.pipe(
          Effect.map((rows) => rows[0]!.n),
          classifySqlErrors("OutboxStatements.moveTopic")
        ),
      whileHolding: (claim, write) => Effect.withSpan(queue.whileHolding(claim, write), "OutboxStatements.whileHolding")
    })
  })

export const layer = (
  options: Outbox.OutboxOptions = {}
): Layer.Layer<OutboxStatements, DurableConfigError, SqlClient.SqlClient | DurableSettings> =>
  Layer.effect(OutboxStatements, make(options))
