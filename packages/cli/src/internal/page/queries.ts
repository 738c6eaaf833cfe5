/**
 * What each view of the admin page reads, every query under the page's statement timeout (and
 * a short lock timeout) in a transaction of its own: a slow query on a large table fails as a
 * `DatabaseError` the page shows, instead of holding a connection of the application's pool.
 */
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import * as Migrations from "@effect-durable/pg/Migrations"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as QueueLifecycle from "@effect-durable/pg/QueueLifecycle"
import * as Transactions from "@effect-durable/pg/Transactions"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { runChecks } from "../diagnostics.js"

/** Topics drawn with a chart; the table lists them all. */
export const CHARTED_TOPICS = 12
export const HISTORY = { window: "15 minutes", buckets: 30 } as const

export interface Receipt {
  readonly id: string
  readonly messageId: string
  readonly state: string
  readonly attempts: number
  readonly receivedAt: string
  readonly processedAt: string | null
  readonly lastError: string | null
}

export const makeQueries = (statementTimeout: Duration.Input) => {
  const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Transactions.withTimeouts({ lockTimeout: "2 seconds", statementTimeout })(effect)

  const version = Effect.map(
    Migrations.schemaVersion,
    ({ found, needed, schema }) => ({ schema, version: found, latest: needed })
  )

  const overview = timed(Effect.gen(function*() {
    const outbox = yield* OutboxAdmin.OutboxAdmin
    const inbox = yield* InboxAdmin.InboxAdmin
    const search = yield* OutboxSearch.OutboxSearch
    const topics = yield* outbox.stats
    const consumers = yield* inbox.stats
    const histories = yield* Effect.forEach(
      topics.slice(0, CHARTED_TOPICS),
      (t) => Effect.map(search.history({ topic: t.topic, ...HISTORY }), (buckets) => [t.topic, buckets] as const)
    )
    const groups = yield* search.deadLetterGroups({ limit: 5 })
    return { topics, consumers, histories: new Map(histories), groups }
  }))

  const messages = (filter: OutboxSearch.MessageFilter, page: { readonly limit: number; readonly before?: string }) =>
    timed(
      Effect.flatMap(
        OutboxSearch.OutboxSearch,
        (search) => Effect.all([search.messages(filter, page), search.count(filter)])
      )
    )

  const message = (id: string) => timed(Effect.flatMap(OutboxSearch.OutboxSearch, (search) => search.message(id)))

  const deadCount = (filter: OutboxSearch.MessageFilter) =>
    timed(Effect.flatMap(OutboxSearch.OutboxSearch, (search) => search.count({ ...filter, state: "dead" })))

  const groups = (topic: string | undefined) =>
    timed(
      Effect.flatMap(OutboxSearch.OutboxSearch, (search) =>
        search.deadLetterGroups({ limit: 200, ...(topic === undefined ? {} : { topic }) }))
    )

  /** The latest receipts of a consumer (both modes), newest first. */
  const receipts = (consumer: string, limit: number) =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const settings = yield* DurableSettings
      return yield* sql<Receipt>`
        SELECT id::text AS id, message_id AS "messageId",
               ${sql.literal(QueueLifecycle.inbox.stateOf)} AS state,
               attempt_count AS attempts,
               to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS "receivedAt",
               to_char(processed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS "processedAt",
               left(last_error, 300) AS "lastError"
          FROM ${sql.literal(settings.table("inbox"))}
         WHERE consumer = ${consumer}
         ORDER BY id DESC LIMIT ${limit}`
    })

  const inbox = (consumer: string | undefined) =>
    timed(Effect.gen(function*() {
      const admin = yield* InboxAdmin.InboxAdmin
      const consumers = yield* admin.stats
      if (consumer === undefined) return { consumers, dead: undefined, receipts: undefined }
      const dead = yield* admin.deadLetters({ consumer, limit: 100 })
      return { consumers, dead, receipts: yield* receipts(consumer, 50) }
    }))

  const ledger = (identity: MutationLedger.MutationIdentity) =>
    timed(Effect.flatMap(MutationLedger.MutationLedger, (l) => l.lookup(identity)))

  const schema = Effect.gen(function*() {
    const v = yield* timed(version)
    const applied = new Set(yield* timed(Migrations.appliedVersions))
    const pending = Migrations.migrations.filter((m) => !applied.has(m.version)).map(({ name, version }) => ({
      version,
      name
    }))
    return { ...v, pending }
  })

  /** The migrations applied to a scratch schema in a transaction rolled back, compared with this one. */
  const drift = timed(Migrations.verifySchema)
  // The checks bound themselves (LISTEN waits up to 3 s; a reserved session for the pooler).
  const checks = runChecks

  return {
    timed,
    version: timed(version),
    overview,
    messages,
    message,
    deadCount,
    groups,
    inbox,
    ledger,
    schema,
    drift,
    checks
  }
}

export type Queries = ReturnType<typeof makeQueries>
