/**
 * The outbox searched and acted on by filter, for operators (the CLI, the admin page):
 * messages matching a filter (ids, topic, ordering key, state, attempts, age, error group,
 * values inside the payload or the headers), one message in full, dead letters grouped by
 * topic and error, recent deliveries per topic. A read model only: the bulk redrive and
 * discard of what a filter matches are `OutboxBulk`'s.
 *
 * @since 0.1.0
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import { MessageId } from "./internal/queue/spec.js"
import { decodeRows } from "./internal/rows.js"
import { decodeFilter, ERROR_GROUP, MessageState, predicate, STATE_OF_ROW } from "./internal/search/filter.js"
import { isoUtc } from "./internal/timestamps.js"
import * as QueueLifecycle from "./QueueLifecycle.js"

export { MessageState } from "./internal/search/filter.js"

/** Which messages an operator means. Every field narrows; an empty filter matches all. */
export interface MessageFilter {
  /** At most 10,000. */
  readonly ids?: ReadonlyArray<string>
  readonly topic?: string
  readonly orderingKey?: string
  readonly state?: MessageState
  /** Deliveries attempted, at least. */
  readonly minAttempts?: number
  /** Created longer ago than this. */
  readonly olderThan?: Duration.Input
  /** Dead for longer than this (only dead messages match). */
  readonly deadFor?: Duration.Input
  /**
   * An error, as anything shows it: a group key (`errorGroup`, `deadLetterGroups`' `error`:
   * the last error with digits as `#`), a raw last error, or the start of either. It matches
   * every message whose error group starts with its own folded form.
   */
  readonly error?: string
  /** Values inside the payload: the value at `path`, as text (`42` matches the number and the string). */
  readonly payload?: ReadonlyArray<JsonMatch>
  /** Values of headers, the same way (`{ path: ["traceparent"], value }`). */
  readonly headers?: ReadonlyArray<JsonMatch>
}

export interface JsonMatch {
  readonly path: ReadonlyArray<string>
  readonly value: string
}

/** A message in a list: everything but its payload and headers. */
export interface MessageSummary {
  readonly id: string
  readonly topic: string
  readonly orderingKey: string | null
  readonly state: MessageState
  /** Deliveries attempted since the last redrive. */
  readonly attempts: number
  /** Of which failed, and leases that ran out. */
  readonly failures: number
  readonly leaseExpiries: number
  /** First 300 characters of the last error. */
  readonly lastError: string | null
  /** The last error's group (digits as `#`, first 500 characters): what `MessageFilter.error` takes. */
  readonly errorGroup: string | null
  /** ISO-8601 UTC. */
  readonly createdAt: string
  readonly availableAt: string
  readonly projectedAt: string | null
  readonly deadAt: string | null
}

/** One failed delivery, as a message's history keeps it. */
export interface FailedDelivery {
  /** The delivery's attempt number. */
  readonly attempt: number
  readonly worker: string | null
  /** ISO-8601 UTC. */
  readonly at: string
  /** Its first 500 characters. */
  readonly error: string
}

/** A message in full. */
export interface MessageDetail extends Omit<MessageSummary, "lastError"> {
  readonly payload: unknown
  readonly headers: Readonly<Record<string, unknown>>
  /** The whole last error (a lease that ran out adds its reason to the delivery error before it). */
  readonly lastError: string | null
  readonly maxAttempts: number
  /** The worker holding (or that last held) the lease, its generation and its end. */
  readonly claimedBy: string | null
  readonly claimGeneration: string
  readonly claimedUntil: string | null
  /** Its last 10 failed deliveries, oldest first (since version 9 of the schema). */
  readonly failureHistory: ReadonlyArray<FailedDelivery>
}

export interface MessagePage {
  /** Newest first. */
  readonly items: ReadonlyArray<MessageSummary>
  /** The `before` of the next page. */
  readonly next: string | undefined
}

/** How many messages match, and the newest of them (a bulk action's `upTo`). */
export interface MatchCount {
  readonly count: number
  readonly maxId: string | null
}

/** Dead letters that share a topic and an error. */
export interface DeadLetterGroup {
  readonly topic: string
  /** The group's key: the last error with digits as `#` (a `MessageFilter.error`). */
  readonly error: string
  readonly count: number
  /** The newest message's last error, as it is. */
  readonly example: string | null
  readonly latestId: string
  readonly firstDeadAt: string
  readonly lastDeadAt: string
}

/** One interval of `history`, oldest first. */
export interface HistoryBucket {
  /** End of the interval, ISO-8601 UTC. */
  readonly at: string
  /** Messages projected in the interval. */
  readonly delivered: number
  /** Messages that died in the interval (and are still dead letters). */
  readonly died: number
  /** Longest wait of a message projected in the interval, from deliverable to projected, in seconds. */
  readonly maxLagSeconds: number | null
}

export class OutboxSearch extends Context.Service<OutboxSearch, {
  /** Messages matching the filter, newest first, `limit` (1-1000) a page. */
  readonly messages: (
    filter: MessageFilter,
    page: { readonly limit: number; readonly before?: string }
  ) => Effect.Effect<MessagePage, InvalidInput | DatabaseError>
  readonly count: (filter: MessageFilter) => Effect.Effect<MatchCount, InvalidInput | DatabaseError>
  /** One message with its payload and headers. */
  readonly message: (id: string) => Effect.Effect<Option.Option<MessageDetail>, InvalidInput | DatabaseError>
  /** Dead letters grouped by topic and error, the largest groups first. */
  readonly deadLetterGroups: (options: {
    readonly topic?: string
    readonly limit: number
  }) => Effect.Effect<ReadonlyArray<DeadLetterGroup>, InvalidInput | DatabaseError>
  /** Deliveries, deaths and lag over the last `window`, in `buckets` intervals (of one topic, or all). */
  readonly history: (options: {
    readonly topic?: string
    readonly window: Duration.Input
    readonly buckets: number
  }) => Effect.Effect<ReadonlyArray<HistoryBucket>, InvalidInput | DatabaseError>
}>()("@effect-durable/pg/OutboxSearch") {}

const SummaryFields = {
  id: Schema.String,
  topic: Schema.String,
  orderingKey: Schema.NullOr(Schema.String),
  state: MessageState,
  attempts: Schema.Number,
  failures: Schema.Number,
  leaseExpiries: Schema.Number,
  lastError: Schema.NullOr(Schema.String),
  errorGroup: Schema.NullOr(Schema.String),
  createdAt: Schema.String,
  availableAt: Schema.String,
  projectedAt: Schema.NullOr(Schema.String),
  deadAt: Schema.NullOr(Schema.String)
}
const SummaryRow = Schema.Struct(SummaryFields)
const DetailRow = Schema.Struct({
  ...SummaryFields,
  payload: Schema.Unknown,
  headers: Schema.Record(Schema.String, Schema.Unknown),
  maxAttempts: Schema.Number,
  claimedBy: Schema.NullOr(Schema.String),
  claimGeneration: Schema.String,
  claimedUntil: Schema.NullOr(Schema.String),
  failureHistory: Schema.Array(Schema.Struct({
    attempt: Schema.Number,
    worker: Schema.NullOr(Schema.String),
    at: Schema.String,
    error: Schema.String
  }))
})
const GroupRow = Schema.Struct({
  topic: Schema.String,
  error: Schema.String,
  count: Schema.Number,
  example: Schema.NullOr(Schema.String),
  latestId: Schema.String,
  firstDeadAt: Schema.String,
  lastDeadAt: Schema.String
})
const HistoryRow = Schema.Struct({
  at: Schema.String,
  delivered: Schema.Number,
  died: Schema.Number,
  maxLagSeconds: Schema.NullOr(Schema.Number)
})

const decodePage = Input.argument(
  "page",
  Schema.Struct({ limit: Input.Count(1000), before: Schema.optional(MessageId) })
)
const decodeId = Input.argument("id", MessageId)
const decodeGroups = Input.argument(
  "options",
  Schema.Struct({ topic: Schema.optional(Input.Text(128)), limit: Input.Count(1000) })
)
const decodeHistory = Input.argument(
  "options",
  Schema.Struct({
    topic: Schema.optional(Input.Text(128)),
    window: Input.DurationIn({ max: "1 day" }),
    buckets: Input.Count(500)
  })
)
export const make: Effect.Effect<OutboxSearch["Service"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    // Every message, open, dead or delivered (the view over the three tables).
    const table = sql.literal(settings.table("outbox_messages"))
    const lifecycle = QueueLifecycle.outbox
    const iso = (column: string) => sql.literal(isoUtc(column))
    const columns = (lastError: string) =>
      sql`
      id::text AS id, topic, ordering_key AS "orderingKey", ${sql.literal(STATE_OF_ROW)} AS state,
      attempt_count AS attempts, failure_count AS failures, lease_expiries AS "leaseExpiries",
      ${sql.literal(lastError)} AS "lastError",
      CASE WHEN last_error IS NOT NULL THEN ${sql.literal(ERROR_GROUP)} END AS "errorGroup",
      ${iso("created_at")} AS "createdAt", ${iso("available_at")} AS "availableAt",
      ${iso("projected_at")} AS "projectedAt", ${iso("dead_at")} AS "deadAt"`

    const where = (filter: MessageFilter) => Effect.map(decodeFilter(filter), (decoded) => predicate(sql, decoded))

    const messages = Effect.fn("OutboxSearch.messages")(
      function*(filter: MessageFilter, page: { readonly limit: number; readonly before?: string }) {
        const matches = yield* where(filter)
        const { before, limit } = yield* decodePage(page)
        const rows = yield* sql`
          SELECT ${columns("left(last_error, 300)")} FROM ${table}
           WHERE ${matches} ${before === undefined ? sql`` : sql`AND id < ${before}`}
           ORDER BY id DESC LIMIT ${limit + 1}`.pipe(decodeRows(SummaryRow), classifySqlErrors("OutboxSearch.messages"))
        const items = rows.slice(0, limit)
        return { items, next: rows.length > limit ? items[items.length - 1]!.id : undefined }
      }
    )

    const count = Effect.fn("OutboxSearch.count")(function*(filter: MessageFilter) {
      const matches = yield* where(filter)
      const [row] = yield* sql<{ count: number; maxId: string | null }>`
          SELECT count(*)::int AS count, max(id)::text AS "maxId" FROM ${table} WHERE ${matches}`.pipe(
        classifySqlErrors("OutboxSearch.count")
      )
      return { count: row!.count, maxId: row!.maxId }
    })

    const message = Effect.fn("OutboxSearch.message")(function*(id: string) {
      const decoded = yield* decodeId(id)
      const rows = yield* sql`
          SELECT ${columns("last_error")}, payload, headers, max_attempts AS "maxAttempts",
                 claimed_by AS "claimedBy", claim_generation::text AS "claimGeneration", ${
        iso("claimed_until")
      } AS "claimedUntil",
                 coalesce(failures, '[]') AS "failureHistory"
            FROM ${table} WHERE id = ${decoded}`.pipe(decodeRows(DetailRow), classifySqlErrors("OutboxSearch.message"))
      return Option.fromNullishOr(rows[0])
    })

    const deadLetterGroups = Effect.fn("OutboxSearch.deadLetterGroups")(
      function*(options: { readonly topic?: string; readonly limit: number }) {
        const { limit, topic } = yield* decodeGroups(options)
        return yield* sql`
          SELECT topic, ${sql.literal(ERROR_GROUP)} AS error, count(*)::int AS count,
                 (array_agg(left(last_error, 300) ORDER BY id DESC))[1] AS example, max(id)::text AS "latestId",
                 ${iso("min(dead_at)")} AS "firstDeadAt", ${iso("max(dead_at)")} AS "lastDeadAt"
            FROM ${table}
           WHERE ${sql.literal(lifecycle.is.dead)} ${topic === undefined ? sql`` : sql`AND topic = ${topic}`}
           GROUP BY 1, 2 ORDER BY count DESC, topic, error LIMIT ${limit}`.pipe(
          decodeRows(GroupRow),
          classifySqlErrors("OutboxSearch.deadLetterGroups")
        )
      }
    )

    const history = Effect.fn("OutboxSearch.history")(
      function*(options: { readonly topic?: string; readonly window: Duration.Input; readonly buckets: number }) {
        const decoded = yield* decodeHistory(options)
        const step = Duration.toMillis(decoded.window) / 1000 / decoded.buckets
        const topic = decoded.topic === undefined ? sql`` : sql`AND topic = ${decoded.topic}`
        // Two range scans (projected_at has an index; dead rows are few), bucketed by how long ago.
        return yield* sql`
          WITH delivered AS (
            SELECT floor(extract(epoch FROM now() - projected_at) / ${step})::int AS ago, count(*)::int AS n,
                   max(greatest(extract(epoch FROM projected_at - available_at), 0))::float8 AS lag
              FROM ${table} WHERE projected_at > now() - make_interval(secs => ${step * decoded.buckets}) ${topic}
             GROUP BY 1),
          died AS (
            SELECT floor(extract(epoch FROM now() - dead_at) / ${step})::int AS ago, count(*)::int AS n
              FROM ${table} WHERE dead_at > now() - make_interval(secs => ${step * decoded.buckets}) ${topic}
             GROUP BY 1),
          buckets AS (
            SELECT ago, now() - make_interval(secs => ago * ${step}) AS ends
              FROM generate_series(${decoded.buckets - 1}::int, 0, -1) AS ago)
          SELECT ${iso("b.ends")} AS at,
                 coalesce(d.n, 0) AS delivered, coalesce(x.n, 0) AS died, d.lag AS "maxLagSeconds"
            FROM buckets b
            LEFT JOIN delivered d ON d.ago = b.ago LEFT JOIN died x ON x.ago = b.ago
           ORDER BY b.ago DESC`.pipe(decodeRows(HistoryRow), classifySqlErrors("OutboxSearch.history"))
      }
    )

    return OutboxSearch.of({
      messages,
      count,
      message,
      deadLetterGroups,
      history
    })
  }
)

export const layer: Layer.Layer<OutboxSearch, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(
  OutboxSearch,
  make
)
