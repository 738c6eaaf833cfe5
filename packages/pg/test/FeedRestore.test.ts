// A feed's cursors across a restore into another cluster: the outbox's messages, the lineage and
// the consumers' cursors are copied, as a data dump restores them, from the suite's server into a
// second PostgreSQL started for the test (another system identifier, transaction ids counting
// from the bottom again). The copied consumer goes on where it was: it reads the one message it
// had not read, then those written on the new cluster, none skipped, none twice.
import * as PgServer from "@effect-durable/testing/PgServer"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import * as Durable from "../src/Durable.js"
import * as Feed from "../src/Feed.js"
import * as Outbox from "../src/Outbox.js"
import { eventually, substrate } from "./support.js"

/** What a data-only dump carries of the substrate's feed: rows, in an order their keys allow. */
const TABLES = ["feed_lineage", "feed_consumers", "outbox", "outbox_history", "outbox_dead"] as const

/** Every row of each table, as JSON. */
const dump = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  return yield* Effect.forEach(TABLES, (table) =>
    Effect.map(
      sql<{ rows: string }>`SELECT coalesce(jsonb_agg(to_jsonb(t)), '[]')::text AS rows FROM ${
        sql.literal(`durable.${table}`)
      } t`,
      ([row]) => [table, row!.rows] as const
    ))
})

/** The rows restored, their ids kept, and the id sequence moved past them (as pg_restore does). */
const restore = (tables: ReadonlyArray<readonly [string, string]>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    for (const [table, rows] of tables) {
      const target = sql.literal(`durable.${table}`)
      yield* sql`INSERT INTO ${target} ${sql.literal(table === "outbox" ? "OVERRIDING SYSTEM VALUE" : "")}
                 SELECT * FROM jsonb_populate_recordset(NULL::${target}, ${rows}::jsonb)`
    }
    yield* sql`SELECT setval(pg_get_serial_sequence('durable.outbox', 'id'),
                             (SELECT max(id) FROM durable.outbox_messages))`
  })

const read = (name: string, count: number) => {
  const entries: Array<Feed.FeedEntry> = []
  return eventually(
    Effect.flatMap(Feed.Feed, (feed) => feed.consume(name, (batch) => Effect.sync(() => entries.push(...batch)))).pipe(
      Effect.as(entries)
    ),
    (all) => all.length >= count
  )
}

describe("Feed across a restore", () => {
  it.layer(substrate())((it) => {
    it.effect(
      "a consumer restored into another cluster goes on where it was: the unread message, then the new ones",
      () =>
        Effect.scoped(Effect.gen(function*() {
          const feed = yield* Feed.Feed
          const outbox = yield* Outbox.Outbox
          yield* feed.register("restored", { topics: ["orders"] })
          const before = yield* Effect.forEach([1, 2, 3], (n) => outbox.enqueue("orders", { n }))
          // Two read: the cursor stands between the second message and the third.
          yield* eventually(feed.lag("restored"), ([lag]) => lag!.readable === 3)
          expect(yield* feed.consume("restored", () => Effect.void, { limit: 2 })).toBe(2)
          const copied = yield* dump

          // Another cluster, migrated, the data restored into it.
          const server = yield* Layer.build(PgServer.layerEmbedded())
          const other = Context.get(server, PgServer.PgServer)
          const there = yield* Layer.build(
            Durable.layer({ connection: { url: other.url("postgres") }, migrate: true })
          )
          const onOther = <A, E>(effect: Effect.Effect<A, E, Durable.Services>) => Effect.provide(effect, there)
          yield* onOther(restore(copied))
          const after = yield* onOther(
            Effect.forEach([4, 5], (n) => Effect.flatMap(Outbox.Outbox, (o) => o.enqueue("orders", { n })))
          )
          const resumed = yield* onOther(read("restored", 3))
          expect(resumed.map((e) => e.id)).toEqual([before[2], ...after])
          expect(resumed.map((e) => e.payload)).toEqual([{ n: 3 }, { n: 4 }, { n: 5 }])
          // The new cluster's positions are in the next epoch, above every restored one.
          expect(resumed.map((e) => BigInt(e.position) >> 48n)).toEqual([1n, 2n, 2n])
          expect(yield* onOther(Effect.flatMap(Feed.Feed, (f) => f.consume("restored", () => Effect.void)))).toBe(0)
        })),
      { timeout: 120_000 }
    )
  })
})
