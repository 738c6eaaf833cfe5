/**
 * The outbox's messages as a feed in commit order: any number of named consumers read the
 * same messages of their topics, each at its own position, in one total order, and none ever
 * skips a message that committed late. A consumer applies a batch and advances its cursor in
 * one transaction (`consume`): what the batch wrote commits with the cursor, or neither does.
 * Fan-out costs reads, not copies: the messages are read where they are (open, delivered or
 * dead), not written once per consumer.
 *
 * The order is by position (the writing transaction's id, `internal/functions/feed.ts`), then
 * id; a consumer reads only below the horizon, the oldest transaction of the cluster still
 * writing, so a long open writing transaction anywhere in the cluster holds every feed back
 * (`lag`, `holder`): a stall, never a loss.
 *
 * @since 0.1.0
 */
import { type DatabaseError, FeedConsumerMissing, FeedCursorMoved, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import { runLoop } from "./internal/feed/run.js"
import { type ConsumerRow, type Cursor, type EntryRow, statements } from "./internal/feed/statements.js"
import { messageFields } from "./internal/rows.js"
import { advisoryKey, bounded, lockForTransaction } from "./internal/transaction.js"
import { wakeUps } from "./Notifications.js"
import { channelFor } from "./Outbox.js"
import type { OutboxMessage } from "./OutboxWorker.js"

/** A message as a consumer reads it: as a claim gives it, without the claim, with its place in the feed. */
export interface FeedEntry extends Omit<OutboxMessage, "attempt" | "claim"> {
  /** Where it stands in the feed (with `id`, the order every consumer reads in). */
  readonly position: string
}

/** Where a new consumer starts: every message retained, those committed from now on, or those created since a time. */
export type StartAt = "beginning" | "now" | Date

export interface FeedConsumer {
  readonly name: string
  readonly topics: ReadonlyArray<string>
  /** The position and id of the last message it read. */
  readonly position: string
  readonly lastId: string
  readonly read: number
  readonly createdAt: string
  readonly readAt: string | null
}

export interface FeedLag extends FeedConsumer {
  /** Messages it can read now (at most `LAG_CAP`). */
  readonly readable: number
  /** Messages committed past the horizon, waiting for an older transaction to end (at most `LAG_CAP`). */
  readonly held: number
}

/** What holds the horizon back: the oldest transaction of the cluster that has written. */
export interface HorizonHolder {
  readonly xid: string
  /** Transactions begun since it began. */
  readonly transactionsBehind: number
  /** Its session, when this role may see it (a superuser, the same role, or `pg_read_all_stats`). */
  readonly session: {
    readonly pid: number
    readonly database: string | null
    readonly user: string | null
    readonly applicationName: string | null
    readonly state: string | null
    readonly since: string | null
    readonly query: string | null
  } | null
  /** A prepared transaction's name, when that is what it is. */
  readonly prepared: string | null
  /** How long it has been open, when known. */
  readonly seconds: number | null
}

export interface ConsumeOptions {
  /** Messages per batch, 1 to 10,000; default 100. */
  readonly limit?: number
}

export interface RunOptions extends ConsumeOptions {
  /**
   * How long an idle consumer waits before it reads again; default 100 milliseconds. On
   * `@effect/sql-pg`'s client it also LISTENs, and an enqueue on one of its topics wakes it at
   * commit; the wait stays as the fallback (behind a transaction pooler, which drops
   * notifications, and for a message that becomes readable when an older transaction ends).
   */
  readonly idle?: Duration.Input
  /**
   * Where to LISTEN when the pool goes through a transaction pooler (PgBouncer), which does
   * not carry notifications: a URL straight to PostgreSQL (as the projector's `listenUrl`).
   */
  readonly listenUrl?: Redacted.Redacted<string>
  /** The longest wait before a failed batch is tried again (doubling from the idle wait); default 30 seconds. */
  readonly maxBackoff?: Duration.Input
}

/** What `lag` counts up to. */
export const LAG_CAP = 100_000

export type FeedError = InvalidInput | DatabaseError

export class Feed extends Context.Service<Feed, {
  /**
   * Makes a consumer of `topics` (or returns the one of that name, when its topics are the
   * same), starting at `from` (default `"beginning"`).
   */
  readonly register: (
    name: string,
    options: { readonly topics: ReadonlyArray<string>; readonly from?: StartAt }
  ) => Effect.Effect<FeedConsumer, FeedError>
  /**
   * Reads the consumer's next batch, runs `apply` on it and advances the cursor, in one
   * transaction: `apply`'s writes commit with the cursor. Returns how many it read (0 when
   * there is nothing to read, or another process is applying this consumer's batch).
   */
  readonly consume: <E, R>(
    name: string,
    apply: (entries: ReadonlyArray<FeedEntry>) => Effect.Effect<void, E, R>,
    options?: ConsumeOptions
  ) => Effect.Effect<number, E | FeedConsumerMissing | FeedCursorMoved | FeedError, R>
  /**
   * Consumes for ever: batch after batch, waiting `idle` when there is nothing to read. A batch
   * whose `apply` fails is rolled back, logged and tried again (the feed never skips a message);
   * only a removed consumer or bad options end it.
   */
  readonly run: <E, R>(
    name: string,
    apply: (entries: ReadonlyArray<FeedEntry>) => Effect.Effect<void, E, R>,
    options?: RunOptions
  ) => Effect.Effect<never, FeedConsumerMissing | InvalidInput, R>
  /** Moves a consumer's cursor (waiting for a batch under way to end); the consumer as it is then. */
  readonly reset: (name: string, from: StartAt) => Effect.Effect<FeedLag, FeedConsumerMissing | FeedError>
  /** Removes a consumer; whether there was one. */
  readonly remove: (name: string) => Effect.Effect<boolean, FeedError>
  /** Each consumer with how far behind it is (or the one named). */
  readonly lag: (name?: string) => Effect.Effect<ReadonlyArray<FeedLag>, FeedError>
  /** What holds the horizon back now, if anything does. */
  readonly holder: Effect.Effect<HorizonHolder | null, DatabaseError>
}>()("@effect-durable/pg/Feed") {}

const decodeName = Input.argument("name", Input.Text(128))
const decodeTopics = Input.argument(
  "topics",
  Schema.Array(Input.Text(128)).check(
    Schema.makeFilter((topics) => topics.length >= 1 && topics.length <= 100, { message: "1 to 100 topics" })
  )
)
const decodeLimit = Input.argument("limit", Input.Count(10_000))
const decodeIdle = Input.argument("idle", Input.DurationIn({ min: "1 millis", max: "1 hour" }))
const decodeBackoff = Input.argument("maxBackoff", Input.DurationIn({ min: "1 millis", max: "1 day" }))
const decodeFrom = Input.argument(
  "from",
  Schema.Union([
    Schema.Literals(["beginning", "now"]),
    Schema.Date.check(Schema.makeFilter((date) => !Number.isNaN(date.getTime()), { message: "a valid date" }))
  ]).annotate({ message: `"beginning", "now" or a valid Date` })
)

/** A failure of the application's `apply` inside `run`: logged and retried, never the run's end. */
class ApplyFailure {
  constructor(readonly error: unknown) {}
  toString() {
    return String(this.error)
  }
}

const BEGINNING: Cursor = { position: "0", lastId: "0" }

const toEntry = (row: EntryRow): FeedEntry => ({ ...messageFields(row), position: row.position })

const toConsumer = (row: ConsumerRow): FeedConsumer => ({
  name: row.name,
  topics: row.topics,
  position: row.position,
  lastId: row.last_id,
  read: Number(row.read_count),
  createdAt: row.created_at,
  readAt: row.read_at
})

export const make: Effect.Effect<Feed["Service"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const feed = statements(sql, settings)
    const consumers = sql.literal(settings.table("feed_consumers"))
    const lockKey = (name: string) => advisoryKey(settings.schema, "feed consumer", name)
    const pg = yield* Effect.serviceOption(PgClient.PgClient)
    const channel = channelFor(settings.schema)

    const lagOf = (name: string | null) =>
      feed.lag(name, LAG_CAP).pipe(
        Effect.map((rows) =>
          rows.map((row): FeedLag => ({ ...toConsumer(row), readable: row.readable, held: row.held }))
        )
      )
    const startOf = (topics: ReadonlyArray<string>, from: StartAt) =>
      from === "beginning" ? Effect.succeed(BEGINNING) : Effect.map(feed.start(topics, from), (rows) => rows[0]!)

    const register = Effect.fn("Feed.register")(
      function*(name: string, options: { readonly topics: ReadonlyArray<string>; readonly from?: StartAt }) {
        const decoded = yield* decodeName(name)
        const topics = [...new Set(yield* decodeTopics(options.topics))].sort()
        const from = yield* decodeFrom(options.from ?? "beginning")
        return yield* bounded(
          sql,
          settings,
          "Feed.register",
          Effect.gen(function*() {
            const cursor = yield* startOf(topics, from)
            yield* sql`INSERT INTO ${consumers} (name, topics, position, last_id)
                       VALUES (${decoded}, ${topics}::text[], ${cursor.position}::bigint, ${cursor.lastId}::bigint)
                       ON CONFLICT (name) DO NOTHING`
            const [row] = yield* lagOf(decoded)
            if (row!.topics.join("\u0000") !== topics.join("\u0000")) {
              return yield* new InvalidInput({
                argument: "topics",
                rule:
                  `consumer ${JSON.stringify(decoded)} reads ${JSON.stringify(row!.topics)}: its topics are fixed ` +
                  `when it is registered (remove it and register it again to read others)`
              })
            }
            const { held: _held, readable: _readable, ...consumer } = row!
            return consumer
          })
        )
      }
    )

    const consume = <E, R>(
      name: string,
      apply: (entries: ReadonlyArray<FeedEntry>) => Effect.Effect<void, E, R>,
      options: ConsumeOptions = {}
    ) =>
      Effect.gen(function*() {
        const decoded = yield* decodeName(name)
        const limit = yield* decodeLimit(options.limit ?? 100)
        // Inside a caller's transaction, its timeouts are given back after (`bounded`).
        return yield* bounded(
          sql,
          settings,
          "Feed.consume",
          Effect.gen(function*() {
            // One process applies a consumer's batch at a time; another finds it busy and reads
            // nothing (no wait holding a connection). The lock writes nothing: this transaction
            // takes no id, and holds no feed's horizon, until `apply` or the cursor writes.
            const mine = yield* lockForTransaction(sql, settings, lockKey(decoded), false).pipe(
              classifySqlErrors("Feed.consume")
            )
            if (!mine) return 0
            const [consumer] = yield* sql<{ topics: ReadonlyArray<string>; position: string; last_id: string }>`
              SELECT topics, position::text AS position, last_id::text AS last_id FROM ${consumers}
               WHERE name = ${decoded}`.pipe(classifySqlErrors("Feed.consume"))
            if (consumer === undefined) return yield* new FeedConsumerMissing({ consumer: decoded })
            const rows = yield* feed.read(
              consumer.topics,
              { position: consumer.position, lastId: consumer.last_id },
              limit
            )
              .pipe(classifySqlErrors("Feed.consume"))
            if (rows.length === 0) return 0
            yield* apply(rows.map(toEntry))
            const last = rows[rows.length - 1]!
            // Fenced on the cursor read above: an operator's reset in between rolls the batch back.
            const moved = yield* sql`UPDATE ${consumers}
                 SET position = ${last.position}::bigint, last_id = ${last.id}::bigint,
                     read_count = read_count + ${rows.length}, read_at = now()
               WHERE name = ${decoded} AND position = ${consumer.position}::bigint AND last_id = ${consumer.last_id}::bigint
              RETURNING name`.pipe(classifySqlErrors("Feed.consume"))
            if (moved.length === 0) return yield* new FeedCursorMoved({ consumer: decoded })
            return rows.length
          })
        )
      }).pipe(Effect.withSpan("Feed.consume", { attributes: { "feed.consumer": name } }))

    const run = <E, R>(
      name: string,
      apply: (entries: ReadonlyArray<FeedEntry>) => Effect.Effect<void, E, R>,
      options: RunOptions = {}
    ): Effect.Effect<never, FeedConsumerMissing | InvalidInput, R> =>
      Effect.gen(function*() {
        const idle = yield* decodeIdle(options.idle ?? "100 millis")
        const maxBackoff = yield* decodeBackoff(options.maxBackoff ?? "30 seconds")
        const limit = yield* decodeLimit(options.limit ?? 100)
        const decoded = yield* decodeName(name)
        // Its topics, for its wake-ups (retried while the database is away; a missing consumer ends it).
        const [consumer] = yield* sql<{ topics: ReadonlyArray<string> }>`
          SELECT topics FROM ${consumers} WHERE name = ${decoded}`.pipe(
          Effect.retry(Schedule.spaced(idle)),
          Effect.orDie
        )
        if (consumer === undefined) return yield* new FeedConsumerMissing({ consumer: decoded })
        const listenConfig = options.listenUrl !== undefined
          ? Option.some<PgClient.PgClientConfig>({ url: options.listenUrl })
          : Option.map(pg, (client) => client.config)
        const wakeUp = yield* wakeUps(listenConfig, channel, consumer.topics)
        // What `apply` fails with is boxed: only the feed's own refusals end the run.
        const boxed = (entries: ReadonlyArray<FeedEntry>) =>
          Effect.mapError(apply(entries), (error) => new ApplyFailure(error))
        return yield* runLoop({ name, consume: consume(decoded, boxed, { limit }), wakeUp, idle, maxBackoff, limit })
      }).pipe(Effect.scoped)

    const reset = Effect.fn("Feed.reset")(function*(name: string, from: StartAt) {
      const decoded = yield* decodeName(name)
      const start = yield* decodeFrom(from)
      return yield* bounded(
        sql,
        settings,
        "Feed.reset",
        Effect.gen(function*() {
          yield* lockForTransaction(sql, settings, lockKey(decoded), true)
          const [consumer] = yield* sql<{ topics: ReadonlyArray<string> }>`
            SELECT topics FROM ${consumers} WHERE name = ${decoded} FOR UPDATE`
          if (consumer === undefined) return yield* new FeedConsumerMissing({ consumer: decoded })
          const cursor = yield* startOf(consumer.topics, start)
          yield* sql`UPDATE ${consumers} SET position = ${cursor.position}::bigint, last_id = ${cursor.lastId}::bigint
                      WHERE name = ${decoded}`
          const [lagged] = yield* lagOf(decoded)
          return lagged!
        })
      )
    })

    const remove = Effect.fn("Feed.remove")(function*(name: string) {
      const decoded = yield* decodeName(name)
      const removed = yield* sql`DELETE FROM ${consumers} WHERE name = ${decoded} RETURNING name`.pipe(
        classifySqlErrors("Feed.remove")
      )
      return removed.length > 0
    })

    const lag = Effect.fn("Feed.lag")(function*(name?: string) {
      const decoded = name === undefined ? null : yield* decodeName(name)
      return yield* lagOf(decoded).pipe(classifySqlErrors("Feed.lag"))
    })

    const holder = feed.holder.pipe(
      Effect.map(([row]): HorizonHolder | null =>
        row === undefined ? null : {
          xid: row.xid,
          transactionsBehind: Number(row.behind),
          session: row.pid === null ? null : {
            pid: row.pid,
            database: row.database,
            user: row.user_name,
            applicationName: row.application_name,
            state: row.state,
            since: row.since,
            query: row.query
          },
          prepared: row.prepared,
          seconds: row.seconds
        }
      ),
      classifySqlErrors("Feed.holder"),
      Effect.withSpan("Feed.holder")
    )

    return Feed.of({ register, consume, run, reset, remove, lag, holder })
  }
)

export const layer: Layer.Layer<Feed, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(Feed, make)
