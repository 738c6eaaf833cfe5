/**
 * The layer most suites that touch the substrate start from: a fresh database on the run's
 * PostgreSQL with the substrate migrated into it (`Durable.layerOver` with `migrate: true`),
 * plus small helpers to keep tests apart on a shared database (a fresh name per test) and to
 * read a message's row as the database holds it.
 *
 * @since 0.1.0
 */
import * as Durable from "@effect-durable/pg/Durable"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as QueueLifecycle from "@effect-durable/pg/QueueLifecycle"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestDatabase from "./TestDatabase.js"

// Without cursor keys: the substrate provides no Keyset, and a suite that pages composes its own.
export interface Options extends Omit<Durable.Options, "connection" | "migrate" | "cursorKeys"> {
  /** The fresh database's options (its pool size, application name). */
  readonly database?: TestDatabase.Options
}

/** A migrated substrate in a fresh database, with the database's `SqlClient` and `PgClient`. */
export const layer = (options: Options = {}) => {
  const { database, ...substrate } = options
  return Durable.layerOver({ ...substrate, migrate: true }).pipe(
    Layer.provideMerge(TestDatabase.layerFresh({ maxConnections: 12, ...database }))
  )
}

let names = 0

/** A name no other test of this process has used (a topic, a consumer): tests stay apart. */
export const freshName = (prefix = "t"): string => `${prefix}-${++names}`

/** An outbox row as the tests inspect it. */
export interface OutboxRow {
  readonly id: string
  readonly topic: string
  readonly claimed_by: string | null
  readonly claim_generation: string
  readonly attempt_count: number
  readonly projected: boolean
  readonly dead: boolean
  readonly last_error: string | null
  /** No live lease: `claimed_until` is NULL. */
  readonly released: boolean
}

/** The outbox rows with these ids, in id order. */
export const outboxRows = (ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // Every message, wherever it is now: open, dead or delivered.
    const table = sql.literal((yield* DurableSettings).table("outbox_messages"))
    return yield* sql<OutboxRow>`
      SELECT id::text, topic, claimed_by, claim_generation::text, attempt_count, ${
      sql.literal(QueueLifecycle.outbox.is.done)
    } AS projected,
             ${sql.literal(QueueLifecycle.outbox.is.dead)} AS dead, last_error, claimed_until IS NULL AS released
        FROM ${table} o WHERE o.id = ANY(${ids}::bigint[]) ORDER BY o.id`
  })

/** How many of these messages are projected. */
export const projectedCount = (ids: ReadonlyArray<string>) =>
  Effect.map(outboxRows(ids), (rows) => rows.filter((row) => row.projected).length)

/**
 * Settles open outbox messages by hand, where a test arranges what a worker would have done:
 * the messages `where` selects (SQL over the open table's columns) move, as a settle moves them,
 * into the dead letters (`"dead"`, `dead_at` now unless `changes` says otherwise) or the history
 * (`"delivered"`, `projected_at` now unless `changes` says otherwise), with `changes` (column →
 * SQL expression) applied on the way. Returns their ids.
 */
export const settleByHand = (
  to: "dead" | "delivered",
  where: string,
  changes: Readonly<Record<string, string>> = {}
) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const target = settings.table(to === "dead" ? "outbox_dead" : "outbox_history")
    const all = { [to === "dead" ? "dead_at" : "projected_at"]: "now()", claimed_until: "NULL", ...changes }
    const set = Object.entries(all).map(([column, value]) => `'${column}', ${value}`).join(", ")
    return yield* sql.unsafe<{ id: string }>(`
      WITH m AS (DELETE FROM ${settings.table("outbox")} WHERE ${where} RETURNING *)
      INSERT INTO ${target}
      SELECT (jsonb_populate_record(NULL::${target}, to_jsonb(m) || jsonb_build_object(${set}))).* FROM m
      RETURNING id::text AS id`)
  })
