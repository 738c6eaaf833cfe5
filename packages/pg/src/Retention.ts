/**
 * What a purge would delete, counted without deleting: the rows of the outbox (projected),
 * the inbox (processed receipts) or the mutation ledger (records) older than a retention.
 * The same predicates and the same retention floors as the purges themselves, so a dry run
 * and the purge that follows agree.
 *
 * @since 0.1.0
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import * as InboxAdmin from "./InboxAdmin.js"
import * as MutationLedger from "./MutationLedger.js"
import * as OutboxAdmin from "./OutboxAdmin.js"

/** What a purge deletes from. */
export type Target = "outbox" | "inbox" | "ledger"

/** Each target's retention floor: younger rows are never purged. */
export const Floors: Readonly<Record<Target, string>> = {
  outbox: OutboxAdmin.PURGE_FLOOR,
  inbox: InboxAdmin.PURGE_FLOOR,
  ledger: MutationLedger.PURGE_FLOOR
}

const TABLES: Readonly<Record<Target, { readonly table: string; readonly column: string }>> = {
  outbox: { table: "outbox_history", column: "projected_at" },
  inbox: { table: "inbox", column: "processed_at" },
  ledger: { table: "mutation_records", column: "created_at" }
}

const decoders = {
  outbox: Input.argument("olderThan", Input.DurationIn({ min: Floors.outbox, max: "520 weeks" })),
  inbox: Input.argument("olderThan", Input.DurationIn({ min: Floors.inbox, max: "520 weeks" })),
  ledger: Input.argument("olderThan", Input.DurationIn({ min: Floors.ledger, max: "520 weeks" }))
}

/** How many rows `purge({ olderThan })` of `target` would delete now. */
export const purgeable = (
  target: Target,
  olderThan: Duration.Input
): Effect.Effect<number, InvalidInput | DatabaseError, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const seconds = Duration.toMillis(yield* decoders[target](olderThan)) / 1000
    const { column, table } = TABLES[target]
    const [row] = yield* sql<{ n: number }>`
      SELECT count(*)::int AS n FROM ${sql.literal(settings.table(table))}
       WHERE ${sql.literal(column)} < now() - make_interval(secs => ${seconds})`.pipe(
      classifySqlErrors("Retention.purgeable")
    )
    return row!.n
  }).pipe(Effect.withSpan("Retention.purgeable"))
