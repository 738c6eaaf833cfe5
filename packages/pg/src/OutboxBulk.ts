/**
 * The outbox's bulk actions by filter, for operators (the CLI, the admin page): redrive or
 * discard of the dead messages matching an `OutboxSearch.MessageFilter`, in id order, in
 * bounded batches that each commit on their own — an interrupted action leaves whole batches
 * applied and the rest untouched, never half a batch. An action can be held to what the
 * operator confirmed: nothing newer than `upTo` (the `maxId` of the count shown), at most
 * `limit` messages (that count). The transitions are the lifecycle's, the very ones
 * `OutboxAdmin.redrive` and `discard` make.
 *
 * @since 0.2.0
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
import type * as Statement from "effect/sql/Statement"
import * as Stream from "effect/Stream"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import * as Moves from "./internal/queue/moves.js"
import { MAX_BATCH, MessageId } from "./internal/queue/spec.js"
import { inIdOrder } from "./internal/queue/worker.js"
import { decodeFilter, predicate } from "./internal/search/filter.js"
import { bounded } from "./internal/transaction.js"
import type { MessageFilter } from "./OutboxSearch.js"
import * as QueueLifecycle from "./QueueLifecycle.js"

export interface BulkOptions {
  /** Rows per statement (1-10,000). Default 500. */
  readonly batchSize?: number
  /** Leave rows newer than this id alone (the `maxId` of the count the operator confirmed). */
  readonly upTo?: string
  /** Act on at most this many messages in all (the count the operator confirmed). Default: every match. */
  readonly limit?: number
  /** Longest run of one batch's statement (each batch is then its own bounded transaction). */
  readonly statementTimeout?: Duration.Input
}

/** What a bulk action has done so far, after each committed batch. */
export interface BulkProgress {
  /** The ids of this batch. */
  readonly ids: ReadonlyArray<string>
  /** Rows changed so far, this batch included. */
  readonly total: number
}

export class OutboxBulk extends Context.Service<OutboxBulk, {
  /**
   * Makes the dead messages matching the filter deliverable again with fresh attempts, in id
   * order, one committed batch per element. A message that dies again meanwhile is not
   * taken twice.
   */
  readonly redriveMatching: (
    filter: MessageFilter,
    options?: BulkOptions
  ) => Stream.Stream<BulkProgress, InvalidInput | DatabaseError>
  /** Deletes the dead messages matching the filter, one committed batch per element. */
  readonly discardMatching: (
    filter: MessageFilter,
    options?: BulkOptions
  ) => Stream.Stream<BulkProgress, InvalidInput | DatabaseError>
}>()("@effect-durable/pg/OutboxBulk") {}

const decodeBulk = Input.argument(
  "options",
  Schema.Struct({
    batchSize: Schema.optional(Input.Count(MAX_BATCH)),
    upTo: Schema.optional(MessageId),
    limit: Schema.optional(Input.Count(Number.MAX_SAFE_INTEGER, 0)),
    statementTimeout: Schema.optional(Input.DurationIn({ max: "1 day" }))
  })
)

interface Walk {
  /** The largest id acted on so far: the next batch starts above it. */
  readonly after: string
  readonly total: number
}

export const make: Effect.Effect<OutboxBulk["Service"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const table = sql.literal(settings.table("outbox"))
    // Bulk actions act on dead letters: they are in their own table.
    const dead = sql.literal(settings.table("outbox_dead"))
    const lifecycle = QueueLifecycle.outbox

    /** One committed batch after another, in id order, until a batch comes back short or the limit is reached. */
    const bulk = (
      name: string,
      /**
       * The action on the batch's rows (`asked`, a CTE over `batch`): the ids it acted on, and
       * the CTEs it needs before it (a move's DELETE).
       */
      action: (asked: string) => { readonly before?: Statement.Fragment; readonly acted: Statement.Fragment }
    ) =>
    (filter: MessageFilter, options: BulkOptions = {}): Stream.Stream<BulkProgress, InvalidInput | DatabaseError> =>
      Stream.unwrap(Effect.gen(function*() {
        const matches = predicate(sql, yield* decodeFilter(filter))
        const { batchSize = 500, limit = Number.POSITIVE_INFINITY, statementTimeout, upTo } = yield* decodeBulk(options)
        const operation = `OutboxBulk.${name}`
        // Every row of the batch comes back, acted on or not (a redrive leaves one whose dedup key
        // an open message holds): the walk goes on past those, only the acted ones count.
        const statement = (batch: Statement.Fragment) => {
          const { acted, before } = action("asked")
          return sql<{ id: string; acted: boolean }>`
            WITH asked AS (${batch}), ${before === undefined ? sql`` : sql`${before}, `}acted AS (${acted})
            SELECT asked.id::text AS id, acted.id IS NOT NULL AS acted FROM asked LEFT JOIN acted USING (id)`
        }
        const run = (batch: Statement.Statement<{ id: string; acted: boolean }>) =>
          statementTimeout === undefined
            ? classifySqlErrors(operation)(batch)
            : bounded(
              sql,
              { lockTimeout: settings.lockTimeout, statementTimeout: Option.some(statementTimeout) },
              operation,
              batch
            )
        const step = (walk: Walk) => {
          const size = Math.min(batchSize, limit - walk.total)
          return Effect.map(
            run(statement(sql`
              SELECT id FROM ${dead}
               WHERE ${sql.literal(lifecycle.is.dead)} AND id > ${walk.after}::bigint ${
              upTo === undefined ? sql`` : sql`AND id <= ${upTo}::bigint`
            }
                 AND ${matches}
               ORDER BY id LIMIT ${size} FOR UPDATE SKIP LOCKED`)),
            (rows): readonly [ReadonlyArray<BulkProgress>, Option.Option<Walk>] => {
              // In id order: an UPDATE's RETURNING follows its plan, not the batch's ORDER BY.
              const seen = inIdOrder([...rows])
              const ids = seen.filter((row) => row.acted).map((row) => row.id)
              const total = walk.total + ids.length
              const last = seen.length === 0 ? walk.after : seen[seen.length - 1]!.id
              const more = seen.length === size && total < limit
              return [[{ ids, total }], more ? Option.some({ after: last, total }) : Option.none()]
            }
          )
        }
        return limit === 0 ? Stream.empty : Stream.paginate({ after: "0", total: 0 }, step)
      }))

    // The lifecycle's transitions, as `OutboxAdmin.redrive` and `discard` make them.
    const { discard, redrive } = lifecycle.transitions
    // A message whose dedup key an open one holds stays dead (`reopenable`): the rest of its
    // batch goes on. A redriven one moves back into the open table with its id.
    const reopenable = sql.literal(
      QueueLifecycle.reopenable({ open: settings.table("outbox"), from: settings.table("outbox_dead") }, "redrive")
    )
    const redriveMatching = bulk("redriveMatching", (asked) => ({
      before: sql`m AS (DELETE FROM ${dead} q
                         WHERE q.id IN (SELECT id FROM ${sql.literal(asked)}) AND ${sql.literal(redrive.from)}
                           AND ${reopenable}
                        RETURNING q.*)`,
      acted: sql`INSERT INTO ${table} (${sql.literal(Moves.COLUMN_LIST)}) OVERRIDING SYSTEM VALUE
                 SELECT ${sql.literal(Moves.selectList(Moves.RESTART))} FROM m
                 RETURNING id`
    }))

    const discardMatching = bulk("discardMatching", (asked) => ({
      acted: sql`DELETE FROM ${dead} WHERE id IN (SELECT id FROM ${sql.literal(asked)}) AND ${sql.literal(discard.from)}
                 RETURNING id`
    }))

    return OutboxBulk.of({ redriveMatching, discardMatching })
  }
)

export const layer: Layer.Layer<OutboxBulk, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(
  OutboxBulk,
  make
)
