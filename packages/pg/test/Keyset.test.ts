import { describe, expect, it } from "@effect/vitest"
import * as Cursor from "@effect-durable/core/Cursor"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Keyset from "../src/Keyset.js"
import { database } from "./support.js"

const codec = Cursor.layer([{ id: "k1", secret: Redacted.make("keyset-test-secret-32-bytes-long") }])

// 30 events for tenant a, 5 of them sharing one timestamp (id breaks the tie), 2 microseconds apart.
const Live = Layer.effectDiscard(
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all([
      sql`CREATE TABLE events (id bigserial PRIMARY KEY, tenant text NOT NULL, kind text, created_at timestamptz NOT NULL DEFAULT now())`,
      sql`INSERT INTO events (tenant, kind, created_at)
          SELECT 'a', CASE WHEN i % 3 = 0 THEN 'x' ELSE 'y' END,
                 CASE WHEN i BETWEEN 10 AND 14 THEN timestamptz '2026-01-01 00:00:10'
                      WHEN i = 20 THEN timestamptz '2026-01-01 00:00:19.999999'
                      WHEN i = 21 THEN timestamptz '2026-01-01 00:00:20.000001'
                      ELSE timestamptz '2026-01-01' + make_interval(secs => i) END
            FROM generate_series(1, 30) i`,
      sql`INSERT INTO events (tenant, kind) SELECT 'b', 'x' FROM generate_series(1, 3)`
    ], { discard: true }))
).pipe(Layer.provideMerge(Keyset.layer.pipe(Layer.provideMerge(codec))), Layer.provideMerge(database()))

const expectedOrder = (where: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql.unsafe<{ id: string }>(`SELECT id::text FROM events WHERE ${where} ORDER BY created_at DESC, id DESC`),
      (rows) => rows.map((row) => row.id)
    ))

const traverse = (request: Omit<Keyset.PageRequest, "cursor">, between?: Effect.Effect<void, unknown, SqlClient.SqlClient>) =>
  Effect.gen(function*() {
    const keyset = yield* Keyset.Keyset
    const seen: Array<string> = []
    let cursor: string | undefined = undefined
    let pages = 0
    do {
      const page: Keyset.Page<{ id: string }> = yield* keyset.page<{ id: string }>(cursor === undefined ? request : { ...request, cursor })
      seen.push(...page.items.map((item) => String(item.id)))
      cursor = page.nextCursor
      pages++
      if (between !== undefined && pages === 1) yield* between
    } while (cursor !== undefined)
    return { seen, pages }
  })

describe("Keyset pages", () => {
  it.layer(Live)((it) => {
    it.effect("a traversal serves every row once in (created_at DESC, id DESC) order, ties and microseconds included", () =>
      Effect.gen(function*() {
        for (const limit of [1, 4, 7, 30, 31]) {
          const { pages, seen } = yield* traverse({ table: "events", subject: "tenant-a", where: { tenant: "a" }, limit })
          expect(seen).toEqual(yield* expectedOrder("tenant = 'a'"))
          expect(pages).toBe(Math.max(1, Math.ceil(30 / limit)))
        }
        const filtered = yield* traverse({ table: "events", subject: "tenant-a", where: { tenant: "a", kind: "x" }, limit: 4 })
        expect(filtered.seen).toEqual(yield* expectedOrder("tenant = 'a' AND kind = 'x'"))
        const nulls = yield* traverse({ table: "events", subject: "s", where: { kind: null }, limit: 4 })
        expect(nulls.seen).toEqual([])
      }))

    it.effect("rows inserted after the first page never enter the traversal", () =>
      Effect.gen(function*() {
        const insertNewer = Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql`INSERT INTO events (tenant, kind) SELECT 'a', 'y' FROM generate_series(1, 4)`)
        const before = yield* expectedOrder("tenant = 'a'")
        const { seen } = yield* traverse({ table: "events", subject: "tenant-a", where: { tenant: "a" }, limit: 5 }, insertNewer)
        expect(seen).toEqual(before)
        const sql = yield* SqlClient.SqlClient
        yield* sql`DELETE FROM events WHERE tenant = 'a' AND created_at > '2026-06-01'`
      }))

    it.effect("a cursor for another subject or other filters is refused before any SQL runs", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        const sql = yield* SqlClient.SqlClient
        const first = yield* keyset.page({ table: "events", subject: "tenant-a", where: { tenant: "a" }, limit: 3 })
        const cursor = first.nextCursor!
        yield* sql`ALTER TABLE events RENAME TO events_hidden`
        // Were any SQL run, the missing table would answer; the binding answers first.
        const otherSubject = yield* Effect.flip(keyset.page({ table: "events", subject: "tenant-b", where: { tenant: "a" }, limit: 3, cursor }))
        expect(otherSubject).toMatchObject({ _tag: "CursorBindingMismatch", field: "subject" })
        const otherFilters = yield* Effect.flip(keyset.page({ table: "events", subject: "tenant-a", where: { tenant: "b" }, limit: 3, cursor }))
        expect(otherFilters).toMatchObject({ _tag: "CursorBindingMismatch", field: "filter" })
        const otherTable = yield* Effect.flip(keyset.page({ table: "events_hidden", subject: "tenant-a", where: { tenant: "a" }, limit: 3, cursor }))
        expect(otherTable).toMatchObject({ _tag: "CursorBindingMismatch", field: "filter" })
        const tampered = yield* Effect.flip(keyset.page({ table: "events", subject: "tenant-a", where: { tenant: "a" }, limit: 3, cursor: cursor.slice(0, -2) }))
        expect(tampered._tag).toBe("InvalidCursor")
        const hostile = yield* Effect.flip(keyset.page({ table: "events; DROP TABLE x", subject: "s", limit: 3 }))
        expect(hostile).toMatchObject({ _tag: "InvalidInput", argument: "table" })
        const column = yield* Effect.flip(keyset.page({ table: "events", subject: "s", where: { "tenant = tenant OR true --": "a" }, limit: 3 }))
        expect(column).toMatchObject({ _tag: "InvalidInput", argument: "where.tenant = tenant OR true --" })
        const limit = yield* Effect.flip(keyset.page({ table: "events", subject: "s", limit: 0 }))
        expect(limit).toMatchObject({ _tag: "InvalidInput", argument: "limit" })
        yield* sql`ALTER TABLE events_hidden RENAME TO events`
      }))
  })
})
