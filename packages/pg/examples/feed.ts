// docs/feeds.md: sales commit with their `sale-recorded` message; two consumers read the same
// messages in the same order, each at its own position. The totals projection writes its read
// model in the transaction that advances its cursor, so each sale counts exactly once.
import * as Feed from "@effect-durable/pg/Feed"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"

interface SaleRecorded {
  readonly customer: string
  readonly cents: number
}

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const outbox = yield* Outbox.Outbox
  const feed = yield* Feed.Feed
  yield* sql`CREATE TABLE IF NOT EXISTS customer_totals (customer text PRIMARY KEY, cents bigint NOT NULL)`

  // Each consumer is registered once (again is a no-op) and starts at the beginning.
  yield* feed.register("customer-totals", { topics: ["sale-recorded"] })
  yield* feed.register("audit-export", { topics: ["sale-recorded"] })

  // The read model: applied in the consumer's transaction, with its cursor.
  const project = (entries: ReadonlyArray<Feed.FeedEntry>) =>
    Effect.forEach(entries, (entry) => {
      const sale = entry.payload as SaleRecorded
      return sql`INSERT INTO customer_totals VALUES (${sale.customer}, ${sale.cents})
                 ON CONFLICT (customer) DO UPDATE SET cents = customer_totals.cents + excluded.cents`
    }, { discard: true })
  const exported: Array<string> = []
  const totals = yield* Effect.forkChild(feed.run("customer-totals", project))
  const audit = yield* Effect.forkChild(
    feed.run("audit-export", (entries) => Effect.sync(() => exported.push(...entries.map((e) => e.id))))
  )

  // The business transactions: each sale and its message commit together, or neither does.
  const record = (sale: SaleRecorded) => sql.withTransaction(outbox.enqueue("sale-recorded", sale))
  yield* record({ customer: "ada", cents: 1200 })
  yield* record({ customer: "grace", cents: 800 })
  yield* record({ customer: "ada", cents: 300 })

  // Both consumers have read the three sales (lag: how many each can still read).
  yield* feed.lag().pipe(
    Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (lags) => lags.every((c) => c.read === 3) })
  )
  const rows = yield* sql<{ customer: string; cents: string }>`
    SELECT customer, cents::text AS cents FROM customer_totals ORDER BY customer`
  yield* Fiber.interruptAll([totals, audit])
  return { totals: rows, exported }
})
