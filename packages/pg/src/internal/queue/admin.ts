/**
 * The operator half of a leased queue, shared by the outbox and the stored inbox: dead
 * letters (list, redrive, discard), replay of done rows, purge of done rows in batches,
 * per-group counts, and the plan the claim runs. Nothing here runs on a worker's hot path.
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as SqlClient from "effect/sql/SqlClient"
import type * as SqlError from "effect/sql/SqlError"
import type * as Statement from "effect/sql/Statement"
import { randomBytes } from "node:crypto"
import { classifySqlErrors, sqlStateOf } from "../../ErrorClassification.js"
import type { DeadLetter, DeadLetterPage, PurgeOptions } from "../../LeasedQueue.js"
import { decodeRows } from "../rows.js"
import { inline, quote } from "../sqlText.js"
import { isoUtc } from "../timestamps.js"
import * as Lifecycle from "./lifecycle.js"
import * as Moves from "./moves.js"
import { decodeBatchSize, decodeIds, decodeMovedBy, decodeReason, MessageId, type QueueSpec } from "./spec.js"
import { type ClaimOptions, decodeClaim } from "./worker.js"

/** Counts of one group of a queue (a topic, a consumer). */
const GroupCounts = Schema.Struct({
  group: Schema.String,
  ...(Object.fromEntries(Lifecycle.STATES.map((state) => [state, Schema.Number])) as Record<
    Lifecycle.State,
    typeof Schema.Number
  >),
  oldestReadySeconds: Schema.NullOr(Schema.Number)
})

const DeadLetterRow = Schema.Struct({
  id: Schema.String,
  attempts: Schema.Number,
  lastError: Schema.NullOr(Schema.String),
  deadAt: Schema.String
})

const decodeDeadLetterPage = Input.argument(
  "options",
  Schema.Struct({ limit: Input.Count(1000), before: Schema.optional(MessageId) })
)

/**
 * The query a claim function returns (`RETURN QUERY <query>;`), from its deployed source: its
 * first one, which a function of one query ends with, and the outbox's claim since version 17
 * returns when no topic it may take has a flow limit (`RETURN QUERY <query>; RETURN;`).
 */
const deployedQuery = (source: string | undefined): string | undefined =>
  source === undefined ? undefined : /RETURN QUERY\s+([\s\S]*?);\s*(?:RETURN;|END\s*$)/.exec(source)?.[1]

export const make = (
  sql: SqlClient.SqlClient,
  spec: QueueSpec,
  options: {
    readonly operationPrefix: string
    /** Purges refuse a retention shorter than this. */
    readonly purgeFloor: string
  }
) => {
  const table = sql.literal(spec.table)
  const deadRows = sql.literal(spec.deadRows)
  const done = sql.literal(spec.done)
  const lifecycle = Lifecycle.make(spec)
  const columns = sql.literal(Moves.COLUMN_LIST)
  const op = (name: string) => `${options.operationPrefix}.${name}`
  const decodeOlderThan = Input.argument("olderThan", Input.DurationIn({ min: options.purgeFloor, max: "520 weeks" }))

  /**
   * The plan the claim runs for these arguments where no limit applies: `EXPLAIN (FORMAT JSON)`
   * of the query of its open path (`<queue>_claim_open`, migration 29; the paths of limited
   * topics and consumers call it too) as the database holds it (read from the deployed function,
   * so the plan shown is the one that runs), prepared with the function's generic plan (nothing
   * is claimed). Every statement
   * runs inside one transaction on one reserved connection, so a transaction pooler keeps
   * them on one server connection; the setting is `SET LOCAL` and the prepared statement is
   * deallocated before the transaction ends (a `PREPARE` outlives a rollback), so nothing is
   * left behind on a connection another client gets next.
   */
  const explainClaim = (claimOptions: ClaimOptions, filter: unknown, analyze = false) =>
    Effect.flatMap(
      decodeClaim(claimOptions),
      ({ leaseSeconds, limit, maxLeaseExpiries, perKey, worker }) =>
        Effect.scoped(Effect.gen(function*() {
          const connection = yield* sql.reserve
          const name = `effect_durable_explain_${randomBytes(4).toString("hex")}`
          const run = (text: string) => connection.executeUnprepared(text, [], undefined)
          yield* Effect.acquireRelease(run("BEGIN"), () => Effect.ignore(run("ROLLBACK")))
          yield* run("SET LOCAL plan_cache_mode = force_generic_plan")
          // On the reserved connection: the pool may be all taken by other explains.
          const [deployed] = yield* run(inline(
            sql`SELECT prosrc AS source, coalesce(proconfig, '{}') AS config FROM pg_proc WHERE oid = ${`${spec.openClaim.function}(${spec.openClaim.arguments})`}::regprocedure`
          ))
          const { config = [], source } = (deployed ?? {}) as { source?: string; config?: ReadonlyArray<string> }
          // Planned under the function's own settings (version 21: sorts and JIT off), as it runs.
          for (const setting of config) {
            const at = setting.indexOf("=")
            yield* run(inline(sql`SELECT set_config(${setting.slice(0, at)}, ${setting.slice(at + 1)}, true)`))
          }
          const query = deployedQuery(source)
          // Only a function some migration did not deploy (drift) has another shape.
          if (query === undefined) {
            return yield* Effect.die(
              new Error("the claim function is not in its deployed form (RETURN QUERY ...; END)")
            )
          }
          yield* run(`PREPARE ${name}(${spec.openClaim.arguments}) AS ${query}`)
          // A failed EXPLAIN aborts the transaction: back to the savepoint, so DEALLOCATE runs.
          yield* run("SAVEPOINT explain")
          const explain = run(inline(
            sql`EXPLAIN (${sql.literal(analyze ? "ANALYZE, " : "")}FORMAT JSON) EXECUTE ${
              sql.literal(name)
            }(${worker}::text, ${limit}::integer, ${leaseSeconds}::float8, ${filter}::${
              sql.literal(spec.filterType)
            }, ${maxLeaseExpiries}::integer${spec.keyedRuns ? sql`, ${perKey}::integer` : sql``}${
              sql.literal(spec.openClaim.more)
            })`
          ))
          const rows = yield* Effect.ensuring(
            explain,
            Effect.ignore(Effect.andThen(run("ROLLBACK TO SAVEPOINT explain"), run(`DEALLOCATE ${name}`)))
          )
          return (rows[0] as { "QUERY PLAN": unknown })["QUERY PLAN"]
        })).pipe(classifySqlErrors(op("explainClaim")))
    )

  /** Dead rows matching `where`, newest id first, `limit` at a time after `before`. */
  const deadLetters = <Fields extends Schema.Struct.Fields>(
    page: { readonly limit: number; readonly before?: string },
    where: Statement.Fragment,
    returning: Statement.Fragment,
    extra: Fields
  ): Effect.Effect<DeadLetterPage<Schema.Struct.Type<Fields>>, InvalidInput | DatabaseError> =>
    Effect.gen(function*() {
      const { before, limit } = yield* decodeDeadLetterPage(page)
      const rows: ReadonlyArray<DeadLetter & Schema.Struct.Type<Fields>> = yield* sql`
        SELECT id::text AS id, attempt_count AS attempts, last_error AS "lastError",
               ${sql.literal(isoUtc("dead_at"))} AS "deadAt", ${returning}
          FROM ${deadRows}
         WHERE ${sql.literal(lifecycle.is.dead)} AND ${where}
           ${before === undefined ? sql`` : sql`AND id < ${before}`}
         ORDER BY id DESC
         LIMIT ${limit + 1}`.pipe(
        decodeRows(
          Schema.Struct({ ...DeadLetterRow.fields, ...extra }) as unknown as Schema.Decoder<
            DeadLetter & Schema.Struct.Type<Fields>
          >
        ),
        classifySqlErrors(op("deadLetters"))
      )
      const items = rows.slice(0, limit)
      return { items, next: rows.length > limit ? items[items.length - 1]!.id : undefined }
    })

  const byIds = (
    name: string,
    statement: (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<{ id: string }>, SqlError.SqlError>
  ) =>
  (ids: ReadonlyArray<string>) =>
    Effect.flatMap(decodeIds(ids), (decoded) =>
      decoded.length === 0
        ? Effect.succeed([])
        : statement(decoded).pipe(
          Effect.map((rows) => rows.map((row) => row.id)),
          classifySqlErrors(op(name))
        ))

  const {
    cancel: off,
    discard: gone,
    moveAside: aside,
    retryNow: now
  } = lifecycle.transitions
  /** A transition of the rows named, those in its `from` state only. */
  const move = (transition: { readonly from: string; readonly set: string }) => (ids: ReadonlyArray<string>) =>
    sql<{ id: string }>`UPDATE ${table} SET ${sql.literal(transition.set)}
                         WHERE id = ANY(${ids}::bigint[]) AND ${sql.literal(transition.from)}
                        RETURNING id::text AS id`
  /**
   * A transition that reopens rows: also only those whose dedup key is free (`reopenable`). In a
   * savepoint of its own, tried again when a concurrent reopening took the same key first (the
   * unique index refuses the second: the retry sees the holder and leaves the row).
   */
  const reopen = (name: Lifecycle.Reopening) => (ids: ReadonlyArray<string>) => {
    const from = name === "replay" ? spec.doneRows : spec.deadRows
    const reopenable = sql.literal(Lifecycle.reopenable(spec, { open: spec.table, from }, name))
    const transition = lifecycle.transitions[name]
    return sql.withTransaction(
      spec.moves
        // Back into the open table, with its id, from the dead letters or the history.
        ? sql<{ id: string }>`WITH asked AS (SELECT unnest(${ids}::bigint[]) AS id),
                            m AS (DELETE FROM ${sql.literal(from)} q
                                   WHERE q.id IN (SELECT id FROM asked) AND ${sql.literal(transition.from)}
                                     AND ${reopenable}
                                  RETURNING q.*)
                            INSERT INTO ${table} (${columns}) OVERRIDING SYSTEM VALUE
                            SELECT ${sql.literal(Moves.selectList(Moves.RESTART))} FROM m
                            RETURNING id::text AS id`
        : sql<{ id: string }>`WITH asked AS (SELECT unnest(${ids}::bigint[]) AS id)
                            UPDATE ${table} q SET ${sql.literal(transition.set)}
                             WHERE q.id IN (SELECT id FROM asked) AND ${sql.literal(transition.from)} AND ${reopenable}
                            RETURNING q.id::text AS id`
    ).pipe(Effect.retry({ times: 3, while: (error) => sqlStateOf(error) === "23505" }))
  }

  /** Makes dead rows ready again with fresh attempts; returns the ids redriven. */
  const redrive = byIds("redrive", reopen("redrive"))

  /** Makes done rows ready again (deliver once more); returns the ids replayed. */
  const replay = byIds("replay", reopen("replay"))

  /** Makes delayed rows (a retry's backoff, an enqueue's delay) ready now, attempts kept; returns the ids. */
  const retryNow = byIds("retryNow", move(now))

  /**
   * Sends ready or delayed rows to the dead letters with an operator's reason (a message that
   * blocks its ordering key: the key moves on); returns the ids moved. A claimed row is left
   * to its delivery.
   */
  const moveAside = (ids: ReadonlyArray<string>, moveOptions: { readonly reason: string; readonly by?: string }) =>
    Effect.flatMap(
      Effect.all([decodeReason(moveOptions.reason), decodeMovedBy(moveOptions.by)]),
      ([reason, by]) =>
        byIds(
          "moveAside",
          (decoded) => {
            const why = `dead: moved aside by ${by ?? "an operator"}: ${reason}`
            return spec.moves
              // Out of the open table, into the dead letters.
              ? sql<{ id: string }>`
                WITH m AS (DELETE FROM ${table} q WHERE q.id = ANY(${decoded}::bigint[]) AND ${sql.literal(aside.from)}
                           RETURNING q.*)
                INSERT INTO ${deadRows} (${columns})
                SELECT ${
                Moves.selectFragment(sql, {
                  dead_at: "now()",
                  last_error: sql`concat_ws('; ', m.last_error, ${why}::text)`
                })
              } FROM m
                RETURNING id::text AS id`
              : sql<{ id: string }>`UPDATE ${table}
                 SET ${sql.literal(aside.set)}, last_error = concat_ws('; ', last_error, ${why}::text)
               WHERE id = ANY(${decoded}::bigint[]) AND ${sql.literal(aside.from)}
              RETURNING id::text AS id`
          }
        )(ids)
    )

  /**
   * Cancels open rows (waiting or claimed) with an optional reason; returns the ids cancelled
   * and those that were being delivered (their ids are sent to the holders on `cancelChannel`
   * at commit, when the queue has one).
   */
  const cancel = (
    ids: ReadonlyArray<string>,
    cancelOptions: { readonly reason?: string; readonly by?: string },
    cancelChannel: string | undefined
  ) =>
    Effect.gen(function*() {
      const reason = cancelOptions.reason === undefined ? undefined : yield* decodeReason(cancelOptions.reason)
      const by = (yield* decodeMovedBy(cancelOptions.by)) ?? "an operator"
      const decoded = yield* decodeIds(ids)
      if (decoded.length === 0) return { cancelled: [], interrupted: [] }
      const note = `cancelled by ${by}${reason === undefined ? "" : `: ${reason}`}`
      // One statement: the rows change (an outbox message leaves the open table for the dead
      // letters) and the holders of those being delivered hear of it at commit.
      const rows = yield* (spec.moves
        ? sql<{ id: string; delivering: boolean }>`
        WITH m AS (
          DELETE FROM ${table} q WHERE q.id = ANY(${decoded}::bigint[]) AND ${sql.literal(off.from)} RETURNING q.*),
        changed AS (
          INSERT INTO ${deadRows} (${columns})
          SELECT ${
          Moves.selectFragment(sql, {
            dead_at: "now()",
            cancelled_at: "now()",
            claimed_until: "NULL",
            cancelled_by: sql`${by}::text`,
            last_error: sql`concat_ws('; ', m.last_error, ${note}::text)`
          })
        } FROM m
          RETURNING id),
        delivered AS (
          SELECT c.id, m.claimed_until IS NOT NULL AND m.claimed_until > now() AS delivering
            FROM changed c JOIN m ON m.id = c.id)
        SELECT id::text AS id, delivering${
          cancelChannel === undefined
            ? sql``
            : sql`, CASE WHEN delivering THEN pg_notify(${cancelChannel}, id::text) IS NULL END AS notified`
        } FROM delivered ORDER BY id`
        : sql<{ id: string; delivering: boolean }>`
        WITH before AS (
          SELECT id, claimed_until IS NOT NULL AND claimed_until > now() AS delivering FROM ${table}
           WHERE id = ANY(${decoded}::bigint[]) AND ${sql.literal(off.from)} FOR UPDATE),
        changed AS (
          UPDATE ${table} q SET ${sql.literal(off.set)}, cancelled_by = ${by},
                 last_error = concat_ws('; ', q.last_error, ${`cancelled by ${by}${
          reason === undefined ? "" : `: ${reason}`
        }`}::text)
            FROM before b WHERE q.id = b.id
          RETURNING q.id, b.delivering)
        SELECT id::text AS id, delivering${
          cancelChannel === undefined
            ? sql``
            : sql`, CASE WHEN delivering THEN pg_notify(${cancelChannel}, id::text) IS NULL END AS notified`
        }
          FROM changed ORDER BY id`).pipe(classifySqlErrors(op("cancel")))
      return {
        cancelled: rows.map((row) => row.id),
        interrupted: rows.filter((row) => row.delivering).map((row) => row.id)
      }
    })

  /** Makes cancelled rows ready again with fresh attempts; returns the ids restored. */
  const restore = byIds("restore", reopen("restore"))

  /** Deletes dead rows; returns the ids deleted. */
  const discard = byIds(
    "discard",
    (ids) =>
      sql<{ id: string }>`DELETE FROM ${deadRows} WHERE id = ANY(${ids}::bigint[]) AND ${sql.literal(gone.from)}
                        RETURNING id::text AS id`
  )

  /**
   * Deletes rows done for longer than `olderThan`, `batchSize` at a time. Each batch locks
   * its rows (`FOR UPDATE SKIP LOCKED`) and re-checks them, so a row replayed or redriven
   * concurrently is never deleted.
   */
  const purge = (purgeOptions: PurgeOptions) =>
    Effect.gen(function*() {
      const olderThan = yield* decodeOlderThan(purgeOptions.olderThan)
      const batchSize = yield* decodeBatchSize(purgeOptions.batchSize ?? 1000)
      const seconds = Duration.toMillis(olderThan) / 1000
      const doneRows = sql.literal(spec.doneRows)
      // One cut-off for every step, read from the database's clock once: a day that passes it
      // while the purge runs is left whole to the next purge, not deleted row by row.
      const [read] = yield* sql<{ cutoff: string }>`
        SELECT ${sql.literal(isoUtc("c.at"))} AS cutoff FROM (SELECT now() - make_interval(secs => ${seconds}) AS at) c`
        .pipe(
          classifySqlErrors(op("purge"))
        )
      const cutoff = sql`${read!.cutoff}::timestamptz`
      let total = 0
      if (spec.days !== undefined) {
        // Whole days first, whatever they hold: emptied (a TRUNCATE each, under the day's own
        // lock), then dropped, in a transaction of its own so the history's lock is held for a
        // moment, not while the file system frees the days. Then the rest of the cut-off day
        // and the default partition row by row. The days ahead are made here too.
        const [emptied] = yield* sql<{ n: string }>`
          SELECT ${sql.literal(spec.days.emptyBefore)}(${cutoff})::text AS n`.pipe(classifySqlErrors(op("purge")))
        total += Number(emptied!.n)
        // The emptied days are counted: a drop that fails (its lock not had in time) leaves them,
        // empty, to the next purge, and this one still reports what it emptied.
        yield* sql`SELECT ${sql.literal(spec.days.dropBefore)}(${cutoff})`.pipe(
          classifySqlErrors(op("purge")),
          Effect.catchTag("DatabaseError", (error) =>
            Effect.logWarning(
              `effect-durable: ${spec.queue} purge emptied days of ${total} messages but could not drop them yet: ${error.message}`
            ))
        )
        yield* sql`SELECT ${sql.literal(spec.days.prepare)}(7)`.pipe(classifySqlErrors(op("purge")))
      }
      while (true) {
        const deleted = yield* sql<{ id: string }>`
          DELETE FROM ${doneRows} WHERE id IN (
            SELECT id FROM ${doneRows}
             WHERE ${done} < ${cutoff}
             ORDER BY ${done} LIMIT ${batchSize} FOR UPDATE SKIP LOCKED)
          RETURNING id::text AS id`.pipe(classifySqlErrors(op("purge")))
        total += deleted.length
        if (deleted.length > 0) {
          yield* Effect.logDebug(`effect-durable: ${spec.queue} purge deleted ${total} rows so far`)
        }
        if (deleted.length < batchSize) return total
      }
    })

  /** Counts per value of `group` (a column of ours: topic, consumer), one per state. */
  const counts = (group: "topic" | "consumer") =>
    sql`
      SELECT ${sql.literal(quote(group))} AS "group",
             ${sql.literal(lifecycle.counts)},
             ${sql.literal(lifecycle.oldestReadySeconds)} AS "oldestReadySeconds"
        FROM ${sql.literal(spec.everyRow)}
       GROUP BY 1
       ORDER BY 1`.pipe(decodeRows(GroupCounts), classifySqlErrors(op("stats")))

  return { explainClaim, deadLetters, redrive, replay, discard, retryNow, moveAside, cancel, restore, purge, counts }
}
