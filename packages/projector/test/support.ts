// What projector suites share: a migrated substrate in a fresh database, a recording
// publisher, and waits on the live clock.
import * as Durable from "@effect-durable/pg/Durable"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
export { eventually } from "@effect-durable/testing/Eventually"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { PublishError } from "../src/Publisher.js"
import * as Publisher from "../src/Publisher.js"

export const substrate = (options: TestDatabase.Options = {}) =>
  Durable.layerOver({ migrate: true }).pipe(
    Layer.provideMerge(TestDatabase.layerFresh({ maxConnections: 16, applicationName: "projector-test", ...options }))
  )

/** Every delivery a publisher saw, in the order it saw them. */
export class Deliveries {
  readonly seen: Array<OutboxWorker.OutboxMessage> = []
  ids(): Array<string> {
    return this.seen.map((message) => message.id)
  }
}

/** A publisher that records each message, then runs `behaviour` (default: succeed). */
export const recording = (
  deliveries: Deliveries,
  behaviour: (message: OutboxWorker.OutboxMessage) => Effect.Effect<void, PublishError> = () => Effect.void
) =>
  Publisher.layerHandler((message) =>
    Effect.zipRight(Effect.sync(() => deliveries.seen.push(message)), behaviour(message))
  )

export interface OutboxRow {
  readonly id: string
  readonly claimed_by: string | null
  readonly claim_generation: string
  readonly attempt_count: number
  readonly projected: boolean
  readonly dead: boolean
  readonly last_error: string | null
  readonly released: boolean
}

export const outboxRows = (ids: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<OutboxRow>`
      SELECT id::text, claimed_by, claim_generation::text, attempt_count, projected_at IS NOT NULL AS projected,
             dead_at IS NOT NULL AS dead, last_error, claimed_until IS NULL AS released
        FROM durable.outbox o WHERE o.id = ANY(${ids}::bigint[]) ORDER BY o.id`)

export const projectedCount = (ids: ReadonlyArray<string>) =>
  Effect.map(outboxRows(ids), (rows) => rows.filter((row) => row.projected).length)
