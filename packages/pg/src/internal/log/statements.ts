/**
 * The relay's statements over the slot and the open table (`OutboxLog`): the slot's
 * transactions decoded from `pgoutput`, the open rows they name, and their settling.
 */
import { RelaySlotLost } from "@effect-durable/core/Errors"
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import { PgoutputPlugin } from "pg-logical-replication"
import type { Settings } from "../../DurableConfig.js"
import type { OutboxMessage } from "../../OutboxWorker.js"
import { move } from "../queue/moves.js"
import { messageFields, type MessageRow } from "../rows.js"
import { isoUtc } from "../timestamps.js"

/** One committed transaction as the slot hands it over: where it ends, and its messages on the relayed topics. */
export interface LogTransaction {
  /** The WAL position past its commit: the slot is advanced to it once its messages are settled. */
  readonly end: string
  /** Ids of its outbox messages on the relayed topics, in the order it wrote them. */
  readonly ids: ReadonlyArray<string>
}

/** The logical message a heartbeat writes: a transaction of no messages that lets the slot advance. */
export const HEARTBEAT_PREFIX = "effect-durable-relay"

export interface OpenRow extends MessageRow {
  readonly attempt_count: number
  readonly position: string
}

export const logStatements = (sql: SqlClient.SqlClient, settings: Settings, publication: string) => {
  const t = settings.table
  const outbox = sql.literal(t("outbox"))

  /** The slot's committed transactions not yet confirmed, in commit order, up to about `limit` changes. */
  const read = (slot: string, topics: ReadonlySet<string>, limit: number) =>
    sql<{ data: Uint8Array }>`
      SELECT data FROM pg_logical_slot_peek_binary_changes(${slot}, NULL, ${limit},
        'proto_version', '1', 'publication_names', ${publication}, 'messages', 'true')`.pipe(
      Effect.map((rows) => {
        // A plugin per read: each read decodes afresh, and describes the outbox's table again.
        const plugin = new PgoutputPlugin({ protoVersion: 1, publicationNames: [publication], messages: true })
        const transactions: Array<LogTransaction> = []
        let ids: Array<string> = []
        for (const row of rows) {
          const message = plugin.parse(Buffer.from(row.data))
          if (message.tag === "begin") ids = []
          else if (
            message.tag === "insert" && message.relation.name === "outbox" &&
            message.relation.schema === settings.schema && topics.has(message.new.topic)
          ) ids.push(String(message.new.id))
          else if (message.tag === "commit") transactions.push({ end: message.commitEndLsn!, ids })
        }
        return transactions
      })
    )

  const columns = sql.literal(`o.id::text AS id, o.topic, o.ordering_key, o.payload, o.headers,
    ${isoUtc("o.created_at")} AS created_at, o.attempt_count, o.feed_position::text AS position`)
  const open = sql.literal("o.projected_at IS NULL AND o.dead_at IS NULL AND o.claimed_until IS NULL")
  /** Open messages not claimed by a projector, that `where` (over `o`) selects, in (position, id) order. */
  const openRows = (where: Statement.Fragment, limit: number) =>
    sql<OpenRow>`SELECT ${columns}
                   FROM ${outbox} o
                  WHERE ${where} AND ${open}
                  ORDER BY o.feed_position, o.id LIMIT ${limit}`

  /** The open messages of one transaction's `ids`, in the order it wrote them (a redriven message keeps its old id). */
  const openOf = (ids: ReadonlyArray<string>) =>
    sql<OpenRow>`SELECT ${columns}
                   FROM ${outbox} o
                  WHERE o.id = ANY(${ids}::bigint[]) AND ${open}
                  ORDER BY array_position(${ids}::bigint[], o.id)`

  /** The open messages of `topics` after a cursor, oldest position first. */
  const openAfter = (
    topics: ReadonlyArray<string>,
    after: { readonly position: string; readonly id: string },
    limit: number
  ) =>
    openRows(
      sql`o.topic = ANY(${topics}::text[]) AND (o.feed_position, o.id) > (${after.position}::bigint, ${after.id}::bigint)`,
      limit
    )

  const toMessage = (slot: string) => (row: OpenRow): OutboxMessage => ({
    ...messageFields(row),
    attempt: row.attempt_count + 1,
    claim: { messageId: row.id, worker: `relay:${slot}`, generation: 0 }
  })

  /** Settles published messages: delivered ones to the history, dead ones to the dead letters. */
  const settle = (delivered: ReadonlyArray<string>, dead: ReadonlyArray<{ id: string; reason: string }>) =>
    Effect.gen(function*() {
      const open = sql`q.claimed_until IS NULL AND q.projected_at IS NULL AND q.dead_at IS NULL`
      if (delivered.length > 0) {
        yield* move(sql, t, {
          from: "outbox",
          to: "outbox_history",
          where: sql`q.id = ANY(${delivered}::bigint[]) AND ${open}`,
          changes: { projected_at: "now()", last_error: "NULL", attempt_count: "m.attempt_count + 1" },
          returning: "id"
        })
      }
      for (const { id, reason } of dead) {
        yield* move(sql, t, {
          from: "outbox",
          to: "outbox_dead",
          where: sql`q.id = ${id}::bigint AND ${open}`,
          changes: {
            dead_at: "now()",
            last_error: sql`${`dead: ${reason}`}`,
            attempt_count: "m.attempt_count + 1",
            failure_count: "m.failure_count + 1"
          },
          returning: "id"
        })
      }
    })

  /**
   * A failure of a statement on the slot, as the relay should see it: the slot gone or its WAL
   * lost (`RelaySlotLost`), else the failure itself. Asked outside the failed transaction.
   */
  const lostOr = <E>(slot: string, error: E) =>
    // (invalidation_reason, PostgreSQL 17 and later, read through to_jsonb so that 15 and 16 run it too.)
    sql<{ lost: boolean }>`SELECT wal_status = 'lost' OR to_jsonb(s) ->> 'invalidation_reason' IS NOT NULL AS lost
                           FROM pg_replication_slots s WHERE slot_name = ${slot}`.pipe(
      Effect.flatMap(([state]): Effect.Effect<never, RelaySlotLost | E> =>
        state === undefined || state.lost ? Effect.fail(new RelaySlotLost({ slot })) : Effect.fail(error)
      ),
      Effect.catchTag("SqlError", () => Effect.fail(error))
    )

  return { read, lostOr, openOf, openAfter, toMessage, settle }
}
