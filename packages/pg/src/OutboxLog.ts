/**
 * The outbox read from PostgreSQL's write-ahead log: its messages in commit order, as logical
 * decoding (`pgoutput`, through a replication slot of the relay's own) sees them commit, for a
 * relay that publishes them to a log outside (`@effect-durable/projector/Relay`).
 *
 * Unlike the feed (`Feed`), which reads below the horizon and so waits for the oldest writing
 * transaction of the whole cluster, decoding hands over each transaction when it commits; its
 * cost is the slot, which keeps the WAL the relay has not confirmed (`status`; bound it with
 * `max_slot_wal_keep_size`). The WAL gives the order and names the messages; their content is
 * read from the open table, and a relayed message is settled there (moved to the history), so
 * a message is published while it is open and the table stays the record: a relay that was
 * away, or a slot that lost its WAL, loses nothing (`sweep` publishes what is open from the
 * table).
 *
 * Needs `wal_level = logical`, PostgreSQL 15 or later, and a role that may replicate (the
 * `REPLICATION` attribute) and own the outbox (for the publication).
 *
 * @since 0.2.0
 */
import {
  type DatabaseError,
  InvalidInput,
  LogicalDecodingUnavailable,
  RelaySlotLost
} from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors, sqlStateOf } from "./ErrorClassification.js"
import { HEARTBEAT_PREFIX, logStatements } from "./internal/log/statements.js"
import { advisoryKey, bounded, lockForTransaction } from "./internal/transaction.js"
import type { OutboxMessage } from "./OutboxWorker.js"

/** What the publish of one message came to. */
export type Outcome =
  | { readonly _tag: "Delivered" }
  /** Never deliverable: the message goes to the dead letters with the reason. */
  | { readonly _tag: "Dead"; readonly reason: string }
  /** Not now: the step stops before it, and the message is published again on the next step. */
  | { readonly _tag: "Retry"; readonly reason: string; readonly afterMillis?: number }

/** What one relay step did. */
export interface Step {
  /** Transactions read from the slot. */
  readonly transactions: number
  readonly delivered: number
  readonly dead: number
  /** The publish that asked to be tried again, when one did (the step stopped there). */
  readonly retry: { readonly id: string; readonly reason: string; readonly afterMillis?: number } | null
  /** Where the slot may go: past every transaction whose messages are all settled (null: nowhere new). */
  readonly settledThrough: string | null
  /** Whether another process was relaying this slot (the step did nothing). */
  readonly busy: boolean
}

/** A replication slot of this database, and the WAL it keeps. */
export interface SlotStatus {
  readonly slot: string
  readonly plugin: string | null
  readonly active: boolean
  /** `reserved`, `extended`, `unreserved` or `lost` (PostgreSQL's `wal_status`). */
  readonly walStatus: string | null
  /** Why PostgreSQL invalidated it, when it did (17 and later: `wal_removed`, `idle_timeout`, ...). */
  readonly invalidation: string | null
  /** Bytes of WAL kept for it. */
  readonly retainedBytes: number
  /** Bytes it may still fall behind before `max_slot_wal_keep_size` ends it (null: unbounded). */
  readonly safeBytes: number | null
  readonly confirmedThrough: string | null
}

export type LogError = InvalidInput | DatabaseError

const decodeSlot = Input.argument("slot", Input.Identifier)
const decodeTopics = Input.argument(
  "topics",
  Schema.Array(Input.Text(128)).check(
    Schema.makeFilter((topics) => topics.length >= 1 && topics.length <= 100, { message: "1 to 100 topics" })
  )
)
const decodeLimit = Input.argument("limit", Input.Count(10_000))

/** The topics and the step size of a relay, checked: what `step` and `sweep` take. */
export const decodeStepOptions = (options: { readonly topics: ReadonlyArray<string>; readonly limit?: number }) =>
  Effect.all({ topics: decodeTopics(options.topics), limit: decodeLimit(options.limit ?? 1000) })

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const settings = yield* DurableSettings
  const t = settings.table
  const outbox = sql.literal(t("outbox"))
  /** One publication of the outbox's INSERTs per schema (a publication is the database's). */
  const publication = `effect_durable_${settings.schema}_outbox`
  const publicationName = sql.literal(`"${publication}"`)
  const relaySlots = sql.literal(t("relay_slots"))
  const lockKey = (slot: string) => advisoryKey(settings.schema, "outbox relay", slot)
  const { lostOr, openAfter, openOf, read, settle, toMessage } = logStatements(sql, settings, publication)

  const unavailable = (slot: string) =>
    Effect.gen(function*() {
      const [server] = yield* sql<{ wal_level: string; version: number; may: boolean }>`
        SELECT current_setting('wal_level') AS wal_level, current_setting('server_version_num')::int AS version,
               (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user)
                 -- Managed servers grant it by a role's membership (RDS, Aurora).
                 OR EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'rds_replication'
                               AND pg_has_role(current_user, oid, 'member')) AS may`
      const rule = server!.wal_level !== "logical"
        ? `wal_level is ${server!.wal_level}: it must be logical (set in postgresql.conf, then a restart)`
        : server!.version < 150000
        ? "the server must be PostgreSQL 15 or later"
        : !server!.may
        ? "the role must have the REPLICATION attribute"
        : null
      return rule === null ? null : new LogicalDecodingUnavailable({ slot, rule })
    })

  /**
   * Makes the publication and the slot when missing, and records the slot's topics: whether
   * the open messages of those topics must first be published from the table (`sweep`, then
   * `swept`): they must when the slot was made now (what was open before was never in its
   * stream), when a topic was added (the slot went past its messages), and until a sweep has
   * finished. Recorded before the slot is made: a relay that dies in between sweeps next time.
   */
  const ensure = Effect.fn("OutboxLog.ensure")(function*(slot: string, topics: ReadonlyArray<string>) {
    const name = yield* decodeSlot(slot)
    const decoded = [...new Set((yield* decodeStepOptions({ topics })).topics)].sort()
    return yield* Effect.gen(function*() {
      const refusal = yield* unavailable(name)
      if (refusal !== null) return yield* refusal
      const [published] = yield* sql<{ outbox: boolean }>`
        SELECT EXISTS (SELECT 1 FROM pg_publication_tables t WHERE t.pubname = p.pubname
                          AND t.schemaname = ${settings.schema} AND t.tablename = 'outbox') AS outbox
          FROM pg_publication p WHERE p.pubname = ${publication}`
      if (published === undefined) {
        yield* sql`CREATE PUBLICATION ${publicationName} FOR TABLE ${outbox} WITH (publish = 'insert')`.pipe(
          ignoreDuplicate
        )
      } else if (!published.outbox) {
        // The outbox was made again since (a schema dropped and migrated): publish the new one.
        yield* sql`ALTER PUBLICATION ${publicationName} ADD TABLE ${outbox}`
      }
      const [existing] = yield* sql<{ plugin: string | null; database: string | null; ours: boolean }>`
        SELECT plugin, database, database IS NOT DISTINCT FROM current_database() AS ours
          FROM pg_replication_slots WHERE slot_name = ${name}`
      if (existing !== undefined && (existing.plugin !== "pgoutput" || !existing.ours)) {
        return yield* new InvalidInput({
          argument: "slot",
          rule: `slot ${JSON.stringify(name)} exists for another use (plugin ${existing.plugin}, database ${
            existing.database ?? "none"
          }): name a slot of the relay's own`
        })
      }
      // Topics added since the last sweep: the slot went past their messages, which are open.
      const [record] = yield* sql<{ swept: boolean }>`
        INSERT INTO ${relaySlots} AS r (slot, topics) VALUES (${name}, ${decoded}::text[])
        ON CONFLICT (slot) DO UPDATE SET topics = excluded.topics,
          swept = r.swept AND r.topics @> excluded.topics
        RETURNING swept`
      if (existing !== undefined) return { sweep: !record!.swept }
      yield* sql`UPDATE ${relaySlots} SET swept = false WHERE slot = ${name}`
      // Made once every transaction running now has ended: what committed before is in the
      // table for the sweep, what commits after is in the slot's stream.
      yield* sql`SELECT slot_name FROM pg_create_logical_replication_slot(${name}, 'pgoutput')`.pipe(ignoreDuplicate)
      return { sweep: true }
    }).pipe(
      Effect.catchIf(
        (error) => sqlStateOf(error) === "42501" || sqlStateOf(error) === "53400",
        (error) =>
          Effect.fail(
            new LogicalDecodingUnavailable({
              slot: name,
              rule: sqlStateOf(error) === "42501"
                ? "the role must own the outbox to publish it (CREATE PUBLICATION), or the publication must exist"
                : "every replication slot of the server is taken (max_replication_slots)"
            })
          )
      ),
      classifySqlErrors("OutboxLog.ensure")
    )
  })

  /** Records that the open messages of `topics` were published from the table (unless the topics changed meanwhile). */
  const swept = (slot: string, topics: ReadonlyArray<string>) =>
    sql`UPDATE ${relaySlots} SET swept = true, swept_at = now()
         WHERE slot = ${slot} AND topics = ${[...new Set(topics)].sort()}::text[]`.pipe(
      Effect.asVoid,
      classifySqlErrors("OutboxLog.swept")
    )

  /**
   * The settling commits to disk before the slot moves past it, whatever the server's
   * `synchronous_commit`: the slot's position can be on disk first (an advance may write it at
   * once), and a crash that lost the settling would leave the message open behind the slot.
   */
  const durableCommit = sql`SELECT set_config('synchronous_commit', 'on', true)`

  /**
   * `body` in a relay transaction of the slot: bounded, holding its lock (null when another
   * process holds it), committing to disk.
   */
  const relayTransaction = <A, E, R>(slot: string, operation: string, body: Effect.Effect<A, E, R>) =>
    bounded(
      sql,
      settings,
      operation,
      Effect.gen(function*() {
        if (!(yield* lockForTransaction(sql, settings, lockKey(slot), false))) return null
        yield* durableCommit
        return yield* body
      })
    )

  type Publish<R> = (message: OutboxMessage) => Effect.Effect<Outcome, never, R>

  /** Publishes `messages` in order until one asks to be retried; settles what was published. */
  const publishAll = <R>(messages: ReadonlyArray<OutboxMessage>, publish: Publish<R>) =>
    Effect.gen(function*() {
      const delivered: Array<string> = []
      const dead: Array<{ id: string; reason: string }> = []
      let retry: Step["retry"] = null
      for (const message of messages) {
        const outcome = yield* publish(message)
        if (outcome._tag === "Delivered") delivered.push(message.id)
        else if (outcome._tag === "Dead") dead.push({ id: message.id, reason: outcome.reason })
        else {
          retry = outcome.afterMillis === undefined
            ? { id: message.id, reason: outcome.reason }
            : { id: message.id, reason: outcome.reason, afterMillis: outcome.afterMillis }
          break
        }
      }
      yield* settle(delivered, dead)
      return { delivered: delivered.length, dead: dead.length, retry }
    })

  /**
   * One step of a relay: in one transaction, holding the slot's relay lock (another process
   * relaying it makes this step `busy`), reads the slot's transactions, publishes each one's
   * open messages in order and settles them. Then the slot is advanced past the transactions
   * wholly settled, so that a step that dies anywhere publishes again, never skips: a message
   * published twice is one the destination deduplicates by its id (JetStream's `Nats-Msg-Id`).
   */
  const step = <R>(
    slot: string,
    options: { readonly topics: ReadonlyArray<string>; readonly limit?: number; readonly publish: Publish<R> }
  ): Effect.Effect<Step, LogError | RelaySlotLost, R> =>
    Effect.gen(function*() {
      const name = yield* decodeSlot(slot)
      const decoded = yield* decodeStepOptions(options)
      const topics = new Set(decoded.topics)
      const limit = decoded.limit
      const result = yield* relayTransaction(
        name,
        "OutboxLog.step",
        Effect.gen(function*() {
          const transactions = yield* read(name, topics, limit)
          let delivered = 0
          let dead = 0
          let settledThrough: string | null = null
          for (const transaction of transactions) {
            const rows = transaction.ids.length === 0
              ? []
              : yield* openOf(transaction.ids)
            const done = yield* publishAll(rows.map(toMessage(name)), options.publish)
            delivered += done.delivered
            dead += done.dead
            if (done.retry !== null) {
              return { transactions: transactions.length, delivered, dead, retry: done.retry, settledThrough }
            }
            settledThrough = transaction.end
          }
          return { transactions: transactions.length, delivered, dead, retry: null, settledThrough }
        })
      ).pipe(Effect.catchTag("DatabaseError", (error) => lostOr(name, error)))
      if (result === null) {
        return { transactions: 0, delivered: 0, dead: 0, retry: null, settledThrough: null, busy: true }
      }
      if (result.settledThrough !== null) yield* advance(name, result.settledThrough)
      return { ...result, busy: false }
    }).pipe(Effect.withSpan("OutboxLog.step", { attributes: { "relay.slot": slot } }))

  /**
   * Moves the slot past `lsn` (never back), under the relay lock: a step under way elsewhere
   * advances it itself.
   */
  const advance = (slot: string, lsn: string) =>
    bounded(
      sql,
      settings,
      "OutboxLog.advance",
      Effect.gen(function*() {
        if (!(yield* lockForTransaction(sql, settings, lockKey(slot), false))) return
        yield* sql`SELECT (pg_replication_slot_advance(slot_name, greatest(${lsn}::pg_lsn, confirmed_flush_lsn))).slot_name
                     FROM pg_replication_slots WHERE slot_name = ${slot}`
      })
    )

  /**
   * Publishes the open messages of `topics` from the table, oldest position first, and settles
   * them: what committed before the slot was made (or while it had lost its WAL) and so is not
   * in its stream. Returns how many it published; a publish asking for a retry stops it.
   */
  const sweep = <R>(
    slot: string,
    options: { readonly topics: ReadonlyArray<string>; readonly limit?: number; readonly publish: Publish<R> }
  ): Effect.Effect<Step, LogError, R> =>
    Effect.gen(function*() {
      const name = yield* decodeSlot(slot)
      const { limit, topics } = yield* decodeStepOptions(options)
      let after = { position: "0", id: "0" }
      let delivered = 0
      let dead = 0
      while (true) {
        const page = yield* relayTransaction(
          name,
          "OutboxLog.sweep",
          Effect.gen(function*() {
            const rows = yield* openAfter(topics, after, limit)
            const done = yield* publishAll(rows.map(toMessage(name)), options.publish)
            const last = rows[rows.length - 1]
            return { ...done, read: rows.length, last }
          })
        )
        if (page === null) {
          return { transactions: 0, delivered, dead, retry: null, settledThrough: null, busy: true }
        }
        delivered += page.delivered
        dead += page.dead
        if (page.retry !== null || page.read < limit || page.last === undefined) {
          return { transactions: 0, delivered, dead, retry: page.retry, settledThrough: null, busy: false }
        }
        after = { position: page.last.position, id: page.last.id }
      }
    }).pipe(Effect.withSpan("OutboxLog.sweep", { attributes: { "relay.slot": slot } }))

  /**
   * A transaction of no messages in the slot's stream: the next step reads it and advances the
   * slot past it, so a relay idle while the rest of the database writes lets go of the WAL.
   */
  const heartbeat = sql`SELECT pg_logical_emit_message(true, ${HEARTBEAT_PREFIX}, '')`.pipe(
    Effect.asVoid,
    classifySqlErrors("OutboxLog.heartbeat")
  )

  /** The logical replication slots of this database (or the one named) and the WAL each keeps. */
  const status = Effect.fn("OutboxLog.status")(function*(slot?: string) {
    const name = slot === undefined ? null : yield* decodeSlot(slot)
    const rows = yield* sql<{
      slot_name: string
      plugin: string | null
      active: boolean
      wal_status: string | null
      invalidation: string | null
      retained: string | null
      safe_wal_size: string | null
      confirmed: string | null
    }>`SELECT slot_name, plugin, active, wal_status, to_jsonb(s) ->> 'invalidation_reason' AS invalidation,
              pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint::text AS retained,
              safe_wal_size::text AS safe_wal_size, confirmed_flush_lsn::text AS confirmed
         FROM pg_replication_slots s
        WHERE slot_type = 'logical' AND database = current_database()
          AND ${name === null ? sql`true` : sql`slot_name = ${name}`}
        ORDER BY slot_name`.pipe(classifySqlErrors("OutboxLog.status"))
    return rows.map((row): SlotStatus => ({
      slot: row.slot_name,
      plugin: row.plugin,
      active: row.active,
      walStatus: row.wal_status,
      invalidation: row.invalidation,
      retainedBytes: Number(row.retained ?? 0),
      safeBytes: row.safe_wal_size === null ? null : Number(row.safe_wal_size),
      confirmedThrough: row.confirmed
    }))
  })

  /** Drops the slot (the relay's messages stay open in the table until a relay sweeps them); whether there was one. */
  const drop = Effect.fn("OutboxLog.drop")(function*(slot: string) {
    const name = yield* decodeSlot(slot)
    const dropped = yield* sql`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
                                WHERE slot_name = ${name}`.pipe(classifySqlErrors("OutboxLog.drop"))
    yield* sql`DELETE FROM ${relaySlots} WHERE slot = ${name}`.pipe(classifySqlErrors("OutboxLog.drop"))
    return dropped.length > 0
  })

  return { publication, ensure, swept, step, sweep, heartbeat, status, drop }
})

/** A statement that may race another process making the same object: made by either is made. */
const ignoreDuplicate = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A | undefined, E, R> =>
  Effect.catchIf(self, (error) => sqlStateOf(error) === "42710", () => Effect.succeed(undefined))

export type OutboxLog = Effect.Success<typeof make>
