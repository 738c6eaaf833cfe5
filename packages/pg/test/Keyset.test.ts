import * as Cursor from "@effect-durable/core/Cursor"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as SqlClient from "effect/sql/SqlClient"
import * as FastCheck from "fast-check"
import { positionBytes, positionText } from "../src/internal/keyset/positions.js"
import * as Keyset from "../src/Keyset.js"
import {
  countingStatements,
  createIds,
  idsOf,
  type KeysetService,
  orderedIds,
  refusal,
  traverse
} from "./keysetSupport.js"
import { database } from "./support.js"

const keys = (secret: string) => Cursor.layer([{ id: "k1", secret: Redacted.make(secret) }])
const codec = keys("keyset-test-secret-32-bytes-long")

// A second pool on the suite's database whose sessions live in São Paulo time (UTC-3, with
// clock changes in its history) and print dates day first: nothing they show looks like UTC.
class Elsewhere extends Context.Service<Elsewhere, {
  readonly sql: SqlClient.SqlClient
  readonly keyset: KeysetService
}>()("test/Keyset/Elsewhere") {}

const inSaoPaulo = (url: string) => {
  const parsed = new URL(url)
  parsed.searchParams.set("options", "-c TimeZone=America/Sao_Paulo -c DateStyle=SQL,DMY")
  return Redacted.make(parsed.toString())
}

const ElsewhereLive = Layer.effect(
  Elsewhere,
  Effect.all({ sql: SqlClient.SqlClient, keyset: Keyset.make })
).pipe(
  Layer.provide(
    Layer.unwrap(
      Effect.map(
        TestDatabase.TestDatabase,
        (db) =>
          PgClient.layer({ url: inSaoPaulo(Redacted.value(db.url)), maxConnections: 2 }).pipe(
            Layer.provide(TestDatabase.liveClock)
          )
      )
    )
  ),
  Layer.provide(codec)
)

// Every supported type, with ties, ±infinity, years before 1 and after 9999, local times that
// São Paulo skipped (2018-11-04 00:xx) or lived twice (2019-02-16 23:xx), '' and multibyte
// text, NaN and 20-digit numerics, and three unique tie-breakers of different types. Text and
// numerics are bounded (varchar(n), numeric(p, s)): a cursor carries any value they hold.
const TYPED_COLUMNS = [
  "at_tz",
  "at_local",
  "day",
  "small",
  "medium",
  "big",
  "amount",
  "label",
  "short_label",
  "ref"
] as const
const TIE_BREAKERS = ["id", "uid", "code"] as const
const createTyped = (sql: SqlClient.SqlClient) =>
  Effect.all([
    sql`CREATE TABLE typed (
          id bigserial PRIMARY KEY, uid uuid NOT NULL UNIQUE, code varchar(16) NOT NULL UNIQUE,
          at_tz timestamptz NOT NULL, at_local timestamp NOT NULL, day date NOT NULL,
          small int2 NOT NULL, medium int4 NOT NULL, big int8 NOT NULL, amount numeric(130, 20) NOT NULL,
          label varchar(8) NOT NULL, short_label varchar(12) NOT NULL, ref uuid NOT NULL)`,
    sql`INSERT INTO typed (uid, code, at_tz, at_local, day, small, medium, big, amount, label, short_label, ref)
        SELECT md5('u' || i)::uuid,
               'code-' || lpad(i::text, 3, '0') || CASE WHEN i % 2 = 0 THEN ' é' ELSE '' END,
               CASE i % 12 WHEN 0 THEN timestamptz 'infinity' WHEN 1 THEN timestamptz '-infinity'
                           WHEN 2 THEN timestamptz '0044-03-15 12:00:00.5+00 BC'
                           WHEN 3 THEN timestamptz '12026-01-01 00:00:00.000001+00'
                           ELSE timestamptz '2019-02-17 01:30:00+00' + (i / 4) * interval '7 minutes 0.000001 seconds' END,
               CASE i % 12 WHEN 0 THEN timestamp 'infinity' WHEN 1 THEN timestamp '-infinity'
                           WHEN 2 THEN timestamp '0044-03-15 12:00:00.5 BC'
                           WHEN 3 THEN timestamp '12026-01-01 00:00:00.000001'
                           ELSE timestamp '2018-11-03 23:30:00' + (i / 4) * interval '7 minutes 0.000001 seconds' END,
               CASE i % 12 WHEN 0 THEN date 'infinity' WHEN 1 THEN date '-infinity' WHEN 2 THEN date '0044-03-15 BC'
                           ELSE date '2026-01-01' + i / 4 END,
               (i % 7) - 3,
               (i / 5) * -100000,
               CASE i % 12 WHEN 0 THEN 9223372036854775807 WHEN 1 THEN -9223372036854775808 ELSE i / 3 END,
               CASE i % 12 WHEN 0 THEN 'NaN'::numeric WHEN 1 THEN '-1e100' WHEN 2 THEN '1.0' WHEN 3 THEN '1.00'
                           WHEN 4 THEN '1e-20' ELSE (i / 3)::numeric / 7 END,
               (ARRAY['', ' ', 'a', 'A', 'é', 'e', 'b''q"\\', 'ß', '😀', 'z', 'Z', 'ab'])[i % 12 + 1],
               (ARRAY['', 'x', 'X', 'ÿ', 'x y', '0'])[i % 6 + 1],
               md5((i / 4)::text)::uuid
          FROM generate_series(1, 48) i`
  ], { discard: true })

// 30 events for tenant a, 5 of them sharing one timestamp (id breaks the tie), 2 microseconds apart.
const createEvents = (sql: SqlClient.SqlClient) =>
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
  ], { discard: true })

// Transfers between four accounts in two currencies, many in the same second.
const createTransfers = (sql: SqlClient.SqlClient) =>
  Effect.all([
    sql`CREATE TABLE transfers (
          id bigserial PRIMARY KEY, sender text NOT NULL, receiver text NOT NULL, currency text NOT NULL,
          amount numeric(12, 2) NOT NULL, created_at timestamptz NOT NULL)`,
    sql`INSERT INTO transfers (sender, receiver, currency, amount, created_at)
        SELECT (ARRAY['ann', 'bob', 'cy', 'dee'])[i % 4 + 1], (ARRAY['bob', 'cy', 'dee', 'ann', 'cy'])[i % 5 + 1],
               CASE WHEN i % 3 = 0 THEN 'EUR' ELSE 'USD' END, i * 10,
               timestamptz '2026-03-01 12:00:00+00' + (i / 3) * interval '1 second'
          FROM generate_series(1, 60) i`
  ], { discard: true })

// For the property: one table per type, its value column `v` filled from small integers (so
// values tie often) through an expression of that type; two tie-breakers of different types.
const PROPERTY_VALUES = {
  int4: "x",
  int8: "x::int8 * 1000000000000",
  numeric: "x / 3.0",
  text: "(ARRAY['', ' ', 'a', 'A', 'é', 'e', 'ß', 'b''q', '😀', 'z', 'Z', 'ab', 'x y'])[x + 7]",
  uuid: "md5(x::text)::uuid",
  date: "CASE x WHEN 6 THEN date 'infinity' ELSE date '2026-01-01' + x END",
  timestamptz: "timestamptz '2019-02-17 02:00:00+00' + x * interval '17 minutes 0.000001 seconds'",
  timestamp: "timestamp '2018-11-04 00:30:00' + x * interval '13 minutes 0.000003 seconds'"
} as const
type PropertyType = keyof typeof PROPERTY_VALUES
const PROPERTY_TYPES = Object.keys(PROPERTY_VALUES) as Array<PropertyType>
// Text and numerics with the bound a cursor needs; the other types bound themselves.
const PROPERTY_COLUMNS: Partial<Record<PropertyType, string>> = { numeric: "numeric(20, 10)", text: "varchar(4)" }

const createPropertyTables = (sql: SqlClient.SqlClient) =>
  Effect.forEach(PROPERTY_TYPES, (type) =>
    sql.unsafe(`CREATE TABLE prop_${type} (
                  id bigserial PRIMARY KEY, k uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(), v ${
      PROPERTY_COLUMNS[type] ?? type
    } NOT NULL)`), {
    discard: true
  })

const Tables = Layer.effectDiscard(
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => Effect.all([createTyped(sql), createEvents(sql), createTransfers(sql), createPropertyTables(sql)])
  )
)

const Live = Layer.mergeAll(Keyset.layer, ElsewhereLive, Tables).pipe(
  Layer.provideMerge(codec),
  Layer.provideMerge(database())
)

describe("Keyset traversals", () => {
  it.layer(Live)((it) => {
    it.effect("every supported column type, both directions: every row exactly once, in ORDER BY order", () =>
      Effect.gen(function*() {
        for (const [i, column] of TYPED_COLUMNS.entries()) {
          const tieBreaker = TIE_BREAKERS[i % TIE_BREAKERS.length]!
          for (const direction of ["desc", "asc"] as const) {
            const order = { column, tieBreaker, direction }
            const expected = yield* orderedIds("typed", order)
            expect(expected.length).toBe(48)
            for (const limit of [1, 5, 48]) {
              const { pages, seen } = yield* traverse({ table: "typed", subject: "s", order, limit })
              expect(seen, `${column}/${tieBreaker} ${direction} by ${limit}`).toEqual(expected)
              expect(pages).toBe(Math.ceil(48 / limit))
            }
          }
        }
      }))

    it.effect("the default order is (created_at DESC, id DESC); ties and microseconds across page boundaries", () =>
      Effect.gen(function*() {
        for (const limit of [1, 4, 7, 30, 31]) {
          const { pages, seen } = yield* traverse({
            table: "events",
            subject: "tenant-a",
            where: { tenant: "a" },
            limit
          })
          expect(seen).toEqual(
            yield* orderedIds("events", { column: "created_at", tieBreaker: "id", direction: "desc" }, "tenant = 'a'")
          )
          expect(pages).toBe(Math.max(1, Math.ceil(30 / limit)))
        }
        const filtered = yield* traverse({
          table: "events",
          subject: "tenant-a",
          where: { tenant: "a", kind: "x" },
          limit: 4
        })
        expect(filtered.seen).toEqual(
          yield* orderedIds(
            "events",
            { column: "created_at", tieBreaker: "id", direction: "desc" },
            "tenant = 'a' AND kind = 'x'"
          )
        )
        const nulls = yield* traverse({ table: "events", subject: "s", where: { kind: null }, limit: 4 })
        expect(nulls.seen).toEqual([])
      }))

    it.effect("items are the table's rows, without the position columns", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        for (const direction of ["desc", "asc"] as const) {
          const page = yield* keyset.page({ table: "events", subject: "s", order: { direction }, limit: 2 })
          expect(page.items.map((item) => Object.keys(item).sort())).toEqual([
            ["created_at", "id", "kind", "tenant"],
            ["created_at", "id", "kind", "tenant"]
          ])
        }
      }))

    it.effect("in a non-UTC session (São Paulo, day-first dates), no row is missing and none served twice", () =>
      Effect.gen(function*() {
        const elsewhere = yield* Elsewhere
        const [session] = yield* elsewhere.sql<{ timezone: string; datestyle: string }>`
          SELECT current_setting('TimeZone') AS timezone, current_setting('DateStyle') AS datestyle`
        expect(session).toEqual({ timezone: "America/Sao_Paulo", datestyle: "SQL, DMY" })
        for (const column of ["at_tz", "at_local", "day"] as const) {
          for (const direction of ["desc", "asc"] as const) {
            const order = { column, tieBreaker: "id", direction }
            const expected = yield* orderedIds("typed", order)
            const there = yield* traverse({ table: "typed", subject: "s", order, limit: 3 }, {
              via: () => Effect.succeed(elsewhere.keyset)
            })
            expect(there.seen, `${column} ${direction} in São Paulo`).toEqual(expected)
            // A cursor issued in one session's TimeZone and DateStyle pages on in the other's.
            const alternating = yield* traverse({ table: "typed", subject: "s", order, limit: 3 }, {
              via: (page) => page % 2 === 0 ? Effect.succeed(elsewhere.keyset) : Keyset.Keyset
            })
            expect(alternating.seen, `${column} ${direction} alternating`).toEqual(expected)
          }
        }
      }))

    it.effect("a caller SQL filter pages the transfers where an account is sender or receiver, in both directions", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        for (const direction of ["desc", "asc"] as const) {
          const order = { column: "created_at", tieBreaker: "id", direction } as const
          const { seen } = yield* traverse({
            table: "transfers",
            subject: "ann",
            order,
            // Its OR stays inside its parentheses: another currency never slips in.
            where: { currency: "EUR" },
            filter: sql`sender = ${"ann"} OR receiver = ${"ann"}`,
            limit: 2
          })
          const expected = yield* orderedIds(
            "transfers",
            order,
            "currency = 'EUR' AND (sender = 'ann' OR receiver = 'ann')"
          )
          expect(expected.length).toBeGreaterThan(4)
          expect(seen).toEqual(expected)
        }
      }))
  })
})

describe("Keyset high-water mark", () => {
  it.layer(Live)((it) => {
    // Later than every row of the suite whatever today's date: they sort last.
    const insertNewer = Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql`INSERT INTO events (tenant, kind, created_at)
          SELECT 'a', 'y', timestamptz '2999-01-01' + make_interval(secs => i) FROM generate_series(1, 4) i`)
    const deleteNewer = Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql`DELETE FROM events WHERE created_at >= '2999-01-01'`
    )

    it.effect("rows inserted after a descending traversal's first page never enter it", () =>
      Effect.gen(function*() {
        const order = { column: "created_at", tieBreaker: "id", direction: "desc" } as const
        const before = yield* orderedIds("events", order, "tenant = 'a'")
        const { seen } = yield* traverse({
          table: "events",
          subject: "tenant-a",
          where: { tenant: "a" },
          order,
          limit: 5
        }, {
          between: (page) => page <= 2 ? insertNewer : Effect.void
        })
        expect(seen).toEqual(before)
        yield* deleteNewer
      }))

    it.effect("rows inserted during an ascending traversal are not served: its first page reads the last position", () =>
      Effect.gen(function*() {
        const order = { column: "created_at", tieBreaker: "id", direction: "asc" } as const
        const before = yield* orderedIds("events", order, "tenant = 'a'")
        const { seen } = yield* traverse({
          table: "events",
          subject: "tenant-a",
          where: { tenant: "a" },
          order,
          limit: 5
        }, {
          between: () => insertNewer
        })
        expect(seen).toEqual(before)
        yield* deleteNewer
      }))

    it.effect("rows deleted during a traversal are not served; deleting the rows its cursor points at loses and repeats nothing", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE shrinking AS SELECT * FROM events WHERE tenant = 'a'`
        yield* sql`ALTER TABLE shrinking ADD PRIMARY KEY (id), ALTER created_at SET NOT NULL`
        for (const direction of ["desc", "asc"] as const) {
          const order = { column: "created_at", tieBreaker: "id", direction } as const
          const before = yield* orderedIds("shrinking", order)
          const unservedDeleted = new Set<string>()
          const { seen } = yield* traverse({ table: "shrinking", subject: "s", order, limit: 4 }, {
            between: (_, served) => {
              // The row the cursor points at, the first row served (a descending traversal's
              // high-water mark) and the next two rows, not served yet.
              const next = before.filter((id) => !served.includes(id) && !unservedDeleted.has(id)).slice(0, 2)
              for (const id of next) unservedDeleted.add(id)
              return sql`DELETE FROM shrinking WHERE id IN ${sql.in([served[served.length - 1]!, served[0]!, ...next])}`
            }
          })
          expect(unservedDeleted.size).toBeGreaterThan(4)
          expect(seen).toEqual(before.filter((id) => !unservedDeleted.has(id)))
          yield* sql`TRUNCATE shrinking`
          yield* sql`INSERT INTO shrinking SELECT * FROM events WHERE tenant = 'a'`
        }
      }))
  })
})

describe("Keyset cursors", () => {
  it.layer(Live)((it) => {
    it.effect("a cursor for another subject, table, order or filters is refused before any SQL runs", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        const sql = yield* SqlClient.SqlClient
        const request: Keyset.PageRequest = {
          table: "transfers",
          subject: "ann",
          where: { currency: "EUR" },
          filter: sql`sender = ${"ann"} OR receiver = ${"ann"}`,
          limit: 2
        }
        const cursor = (yield* keyset.page(request)).nextCursor!
        const { filter: _, ...unfiltered } = request
        const rebound: Array<readonly [Keyset.PageRequest, "subject" | "filter"]> = [
          [{ ...request, subject: "bob" }, "subject"],
          [{ ...request, table: "events" }, "filter"],
          [{ ...request, schema: "public" }, "filter"],
          [{ ...request, order: { direction: "asc" } }, "filter"],
          [{ ...request, order: { column: "id" } }, "filter"],
          [{ ...request, order: { tieBreaker: "amount" } }, "filter"],
          [{ ...request, where: { currency: "USD" } }, "filter"],
          [{ ...request, where: {} }, "filter"],
          [{ ...request, filter: sql`sender = ${"bob"} OR receiver = ${"ann"}` }, "filter"],
          [{ ...request, filter: sql`sender = ${"ann"} AND receiver = ${"ann"}` }, "filter"],
          [unfiltered, "filter"]
        ]
        for (const [changed, field] of rebound) {
          const { error, statements } = yield* refusal(keyset.page({ ...changed, cursor }))
          expect(error).toMatchObject({ _tag: "CursorBindingMismatch", field })
          expect(statements).toBe(0)
        }
        // The same request, its filter written again, pages on.
        const next = yield* keyset.page({ ...request, filter: sql`sender = ${"ann"} OR receiver = ${"ann"}`, cursor })
        expect(next.items).toHaveLength(2)
      }))

    it.effect("a filter built again from equal Dates, bigints and bytes binds alike; another Date does not", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const keyset = yield* Keyset.Keyset
        const since = (ms: number) =>
          sql`created_at >= ${new Date(ms)} AND amount < ${10_000n} AND ${Buffer.from("ab")}::bytea IS NOT NULL`
        const start = Date.parse("2026-03-01T12:00:05Z")
        const { seen } = yield* traverse({ table: "transfers", subject: "s", filter: since(start), limit: 7 }, {
          via: () => Effect.succeed({ page: (request) => keyset.page({ ...request, filter: since(start) }) })
        })
        expect(seen).toEqual(
          yield* orderedIds(
            "transfers",
            { column: "created_at", tieBreaker: "id", direction: "desc" },
            "created_at >= '2026-03-01T12:00:05Z'"
          )
        )
        const { nextCursor } = yield* keyset.page({ table: "transfers", subject: "s", filter: since(start), limit: 7 })
        const { error } = yield* refusal(
          keyset.page({ table: "transfers", subject: "s", filter: since(start + 1), limit: 7, cursor: nextCursor! })
        )
        expect(error).toMatchObject({ _tag: "CursorBindingMismatch", field: "filter" })
      }))

    it.effect("a tampered cursor, or one signed with a secret this service does not hold, is InvalidCursor before any SQL runs", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        const request: Keyset.PageRequest = { table: "events", subject: "tenant-a", where: { tenant: "a" }, limit: 3 }
        const cursor = (yield* keyset.page(request)).nextCursor!
        const foreign = yield* Keyset.make.pipe(Effect.provide(keys("another-secret-of-32-bytes-long!!")))
        const foreignCursor = (yield* foreign.page(request)).nextCursor!
        for (
          const [token, reason] of [
            [cursor.slice(0, -2), /signature mismatch|canonical/],
            [
              cursor.slice(0, 10) + (cursor[10] === "A" ? "B" : "A") + cursor.slice(11),
              /signature mismatch|unknown key/
            ],
            [foreignCursor, /signature mismatch/],
            ["", /empty/]
          ] as const
        ) {
          const { error, statements } = yield* refusal(keyset.page({ ...request, cursor: token }))
          expect(error._tag).toBe("InvalidCursor")
          expect((error as { reason: string }).reason).toMatch(reason)
          expect(statements).toBe(0)
        }
      }))
  })
})

describe("Keyset inputs", () => {
  it.layer(Live)((it) => {
    it.effect("a refused argument is a typed error naming the argument and its rule, before any SQL runs", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        const sql = yield* SqlClient.SqlClient
        const cases: Array<readonly [Record<string, unknown>, string, RegExp]> = [
          [{ subject: "" }, "subject", /non-empty/],
          [{ subject: "é".repeat(129) }, "subject", /256 bytes/],
          [{ subject: "tenant\u0000a" }, "subject", /NUL/],
          [{ subject: "tenant-\ud800" }, "subject", /lone surrogate/],
          [{ table: "events; DROP TABLE x" }, "table", /identifier/],
          [{ schema: "Public" }, "schema", /identifier/],
          [{ where: { "tenant = tenant OR true --": "a" } }, "where.tenant = tenant OR true --", /identifier/],
          [{ where: { tenant: "a\u0000" } }, "where.tenant", /without NUL/],
          [{ where: { tenant: Number.NaN } }, "where.tenant", /finite number/],
          [{ where: { tenant: { a: 1 } } }, "where.tenant", /a boolean or null/],
          [{ order: { column: "Created" } }, "order.column", /identifier/],
          [{ order: { tieBreaker: "" } }, "order.tieBreaker", /identifier/],
          [{ order: { direction: "up" } }, "order.direction", /"asc" or "desc"/],
          [{ limit: 0 }, "limit", /from 1 to 1000/],
          [{ limit: 1001 }, "limit", /from 1 to 1000/],
          [{ limit: 1.5 }, "limit", /from 1 to 1000/],
          [{ limit: Number.NaN }, "limit", /from 1 to 1000/],
          [{ filter: "tenant = 'a'" }, "filter", /SQL fragment/],
          [{ filter: sql`tenant = ${"a\u0000"}` }, "filter", /\$1: a string without NUL/],
          [{ filter: sql`kind = ${"x"} AND created_at < ${new Date(Number.NaN)}` }, "filter", /\$2: a valid Date/]
        ]
        for (const [changed, argument, rule] of cases) {
          const request = { table: "events", subject: "s", limit: 3, ...changed } as unknown as Keyset.PageRequest
          const { error, statements } = yield* refusal(keyset.page(request))
          expect(error, argument).toMatchObject({ _tag: "InvalidInput", argument })
          expect((error as { rule: string }).rule, argument).toMatch(rule)
          expect(statements, argument).toBe(0)
        }
      }))

    it.effect("an order the table cannot keep is refused before its first page, naming the argument and the rule", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const keyset = yield* Keyset.Keyset
        yield* sql`CREATE DOMAIN positive AS int CHECK (VALUE > 0)`
        yield* sql`CREATE TABLE awkward (
                     id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(), maybe timestamptz,
                     score float8 NOT NULL DEFAULT 1, tags text[] NOT NULL DEFAULT '{}', rank positive NOT NULL DEFAULT 1,
                     seq int NOT NULL, pair_a int NOT NULL, pair_b int NOT NULL, partial_key int NOT NULL,
                     maybe_key int UNIQUE, UNIQUE (pair_a, pair_b),
                     note text NOT NULL DEFAULT '', free varchar NOT NULL DEFAULT '', amount numeric NOT NULL DEFAULT 0,
                     wide varchar(2000) NOT NULL DEFAULT '')`
        yield* sql`CREATE UNIQUE INDEX awkward_partial ON awkward (partial_key) WHERE partial_key > 0`
        yield* sql`INSERT INTO awkward (seq, pair_a, pair_b, partial_key, maybe_key) SELECT i, i, i, i, i FROM generate_series(1, 5) i`
        const cases: Array<readonly [Partial<Keyset.PageRequest>, string, RegExp]> = [
          [{ order: { column: "maybe" } }, "order.column", /NOT NULL/],
          [{ order: { column: "score" } }, "order.column", /score is double precision/],
          [{ order: { column: "tags" } }, "order.column", /tags is text\[\]/],
          [{ order: { column: "missing" } }, "order.column", /no column missing/],
          [{ order: { tieBreaker: "seq" } }, "order.tieBreaker", /unique index of its own/],
          [{ order: { tieBreaker: "pair_a" } }, "order.tieBreaker", /unique index of its own/],
          [{ order: { tieBreaker: "partial_key" } }, "order.tieBreaker", /unique index of its own/],
          [{ order: { tieBreaker: "maybe_key" } }, "order.tieBreaker", /NOT NULL/],
          [{ order: { tieBreaker: "score" } }, "order.tieBreaker", /score is double precision/],
          // Types whose values have no bound: some row could hold a position no cursor carries.
          [
            { order: { column: "note" } },
            "order.column",
            /note is text, and neither its type nor a validated CHECK constraint bounds its length/
          ],
          [
            { order: { column: "free" } },
            "order.column",
            /free is character varying, and neither its type nor a validated CHECK/
          ],
          [
            { order: { column: "amount" } },
            "order.column",
            /amount is numeric, which holds values of any length: make it numeric\(p, s\)/
          ],
          [{ order: { column: "wide" } }, "order.column", /wide is character varying\(2000\), up to 12000 bytes/],
          [{ table: "nowhere" }, "table", /there is no "nowhere"/],
          [{ schema: "nowhere" }, "table", /there is no "nowhere"."awkward"/]
        ]
        for (const [changed, argument, rule] of cases) {
          const { error, statements } = yield* refusal(
            keyset.page({ table: "awkward", subject: "s", limit: 2, ...changed })
          )
          expect(error, argument).toMatchObject({ _tag: "InvalidInput", argument })
          expect((error as { rule: string }).rule, argument).toMatch(rule)
          // The catalog answered; no page was read.
          expect(statements, argument).toBe(1)
        }
        // A refusal is not remembered: once a migration gives seq its unique index, it pages.
        yield* sql`CREATE UNIQUE INDEX awkward_seq ON awkward (seq)`
        const { seen } = yield* traverse({
          table: "awkward",
          subject: "s",
          order: { column: "seq", tieBreaker: "seq" },
          limit: 2
        })
        expect(seen).toEqual(["5", "4", "3", "2", "1"])
        // A domain pages as its base type does (rank: a domain over int with a CHECK).
        const ranked = yield* traverse({ table: "awkward", subject: "s", order: { column: "rank" }, limit: 2 })
        expect(ranked.seen).toEqual(["5", "4", "3", "2", "1"])
      }))

    it.effect("the catalog is read once per table and order: every later page is one statement", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        const request: Keyset.PageRequest = {
          table: "transfers",
          subject: "s",
          order: { column: "amount", direction: "asc" },
          limit: 5
        }
        const first = yield* countingStatements(keyset.page(request))
        expect(first.statements).toBe(2)
        const cursor = Result.getOrThrow(first.result).nextCursor!
        expect((yield* countingStatements(keyset.page({ ...request, cursor }))).statements).toBe(1)
        expect((yield* countingStatements(keyset.page({ ...request, subject: "t" }))).statements).toBe(1)
      }))
  })
})

// Ids of the given lengths, made of characters that take one to six bytes in a cursor (none NUL:
// PostgreSQL text cannot hold it), each row its own, numbered so that equal lengths differ.
const EXTREME_COLUMNS = [
  ["at_tz", "timestamptz"],
  ["at_local", "timestamp"],
  ["day", "date"],
  ["small", "int2"],
  ["medium", "int4"],
  ["big", "int8"],
  ["amount", "numeric"],
  ["tiny", "numeric"],
  ["round", "numeric"],
  ["u", "uuid"]
] as const

describe("Keyset traversals of long values", () => {
  it.layer(Live)((it) => {
    it.effect("3 short ids, then 3 of 301 characters, 2 a page: every row served exactly once, both directions", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE half_long (id varchar(301) PRIMARY KEY, created_at timestamptz NOT NULL)`
        // The 3 newest short, the next 3 long: the page after the first ends on a long id.
        yield* sql`INSERT INTO half_long VALUES ('short-6', '2026-01-06'), ('short-5', '2026-01-05'),
                     ('short-4', '2026-01-04'), (repeat('c', 301), '2026-01-03'), (repeat('b', 301), '2026-01-02'),
                     (repeat('a', 301), '2026-01-01')`
        for (const direction of ["desc", "asc"] as const) {
          const order = { column: "created_at", tieBreaker: "id", direction }
          const { pages, seen } = yield* traverse({ table: "half_long", subject: "s", order, limit: 2 })
          expect(seen).toEqual(yield* orderedIds("half_long", order))
          expect(new Set(seen).size).toBe(6)
          expect(pages).toBe(3)
        }
      }))

    it.effect("every id long, at the most its column holds, of characters a cursor writes six bytes wide: the traversal completes", () =>
      Effect.gen(function*() {
        const ids = idsOf(Array.from({ length: 9 }, () => 400), ["\u0001", "é", "😀", "\"", "\\"])
        yield* createIds("all_long", "varchar(400)", ids)
        for (const direction of ["desc", "asc"] as const) {
          const order = { column: "created_at", tieBreaker: "id", direction }
          for (const limit of [1, 2, 4]) {
            const { pages, seen } = yield* traverse({ table: "all_long", subject: "s", order, limit })
            expect(seen).toEqual(yield* orderedIds("all_long", order))
            expect(pages).toBe(Math.ceil(9 / limit))
          }
        }
        // The longest subject too: its cursors still fit.
        const { seen } = yield* traverse({ table: "all_long", subject: "s".repeat(256), limit: 2 })
        expect(seen).toHaveLength(9)
      }))

    it.effect("a column widened to text mid-traversal: the next page is a typed refusal (never a defect), and page 1 again is refused", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        const sql = yield* SqlClient.SqlClient
        yield* createIds("widened", "varchar(20)", idsOf([10, 10, 10, 10]))
        const order = { column: "created_at", tieBreaker: "id", direction: "desc" } as const
        const first = yield* keyset.page({ table: "widened", subject: "s", order, limit: 2 })
        expect(first.nextCursor).toBeDefined()
        yield* sql.unsafe(`ALTER TABLE widened ALTER COLUMN id TYPE text`)
        yield* sql.unsafe(`UPDATE widened SET id = id || repeat('w', 9000)`)
        const next = yield* Effect.flip(
          keyset.page({ table: "widened", subject: "s", order, limit: 1, cursor: first.nextCursor! })
        )
        // The tie-breaker outgrew its bound: the refusal names it, not the order column.
        expect(next).toMatchObject({ _tag: "InvalidInput", argument: "order.tieBreaker" })
        const again = yield* Effect.flip(keyset.page({ table: "widened", subject: "s", order, limit: 2 }))
        expect(again).toMatchObject({ _tag: "InvalidInput", argument: "order.tieBreaker" })
      }))

    it.effect("a column that can hold longer values than a cursor carries is refused at the first page, before any row is read", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        // The same rows as above, in a text column (no bound) and a varchar too wide for a cursor.
        const ids = idsOf([3, 3, 3, 301, 301, 301])
        for (
          const [type, rule] of [
            [
              "text",
              /id is text, and neither its type nor a validated CHECK constraint bounds its length\): declare the bound with order\.maxLength\.tieBreaker/
            ],
            [
              "varchar(1000)",
              /id is character varying\(1000\), up to 6000 bytes in a cursor.*varchar\(n\) with n at most \d+/
            ]
          ] as const
        ) {
          yield* createIds("too_long", type, ids)
          const { error, statements } = yield* refusal(keyset.page({ table: "too_long", subject: "s", limit: 2 }))
          expect(error, type).toMatchObject({ _tag: "InvalidInput", argument: "order.tieBreaker" })
          expect((error as { rule: string }).rule, type).toMatch(rule)
          // The catalog answered; no page was read.
          expect(statements, type).toBe(1)
        }
        // A column that fits with a short subject but not with the longest one names the subject.
        yield* createIds("near_full", "varchar(480)", ids)
        const fits = yield* traverse({ table: "near_full", subject: "s", limit: 2 })
        expect(fits.seen).toHaveLength(6)
        const { error } = yield* refusal(keyset.page({ table: "near_full", subject: "s".repeat(256), limit: 2 }))
        expect(error).toMatchObject({ _tag: "InvalidInput", argument: "subject" })
        expect((error as { rule: string }).rule).toMatch(/a subject short enough for this traversal's cursors/)
      }))

    it.effect("any ids of any lengths and characters, any page size, direction and subject: every row served once, in order, or refused before the first page", () =>
      Effect.gen(function*() {
        const services = yield* Effect.context<SqlClient.SqlClient | Keyset.Keyset | Elsewhere>()
        // What each column holds at most, and whether every traversal over it must be served
        // (for any subject), refused, or depends on the subject (the longest leaves less room).
        const columns = {
          "varchar(8)": { most: 8, served: "always" },
          "varchar(64)": { most: 64, served: "always" },
          "varchar(301)": { most: 301, served: "always" },
          "varchar(480)": { most: 480, served: "short subject" },
          "varchar(1000)": { most: 1000, served: "never" },
          text: { most: 700, served: "never" }
        } as const
        yield* Effect.promise(() =>
          FastCheck.assert(
            FastCheck.asyncProperty(
              FastCheck.record({
                type: FastCheck.constantFrom(...(Object.keys(columns) as Array<keyof typeof columns>)),
                lengths: FastCheck.array(FastCheck.integer({ min: 0, max: 1000 }), { maxLength: 12 }),
                units: FastCheck.array(
                  FastCheck.constantFrom("a", "Z", " ", "é", "€", "😀", "\u0001", "\u001f", "\"", "\\"),
                  {
                    minLength: 1,
                    maxLength: 4
                  }
                ),
                limit: FastCheck.integer({ min: 1, max: 5 }),
                direction: FastCheck.constantFrom("asc" as const, "desc" as const),
                subject: FastCheck.constantFrom("s", "s".repeat(256), "é".repeat(128))
              }),
              ({ direction, lengths, limit, subject, type, units }) =>
                Effect.runPromise(Effect.provideContext(
                  Effect.gen(function*() {
                    const { most, served } = columns[type]
                    const ids = idsOf(lengths.map((length) => Math.min(Math.max(length, 3), most)), units)
                    // A table per type: the catalog keeps a table's layout for the life of the layer.
                    const table = `prop_ids_${type.replace(/\W/g, "")}`
                    yield* createIds(table, type, ids)
                    const order = { column: "created_at", tieBreaker: "id", direction }
                    let pagesServed = 0
                    const outcome = yield* Effect.result(traverse({ table, subject, order, limit }, {
                      between: (page) => Effect.sync(() => void (pagesServed = page))
                    }))
                    const mustServe = served === "always" || (served === "short subject" && subject === "s")
                    if (Result.isFailure(outcome)) {
                      // Refused before the first page: never half-served.
                      expect(pagesServed).toBe(0)
                      expect(outcome.failure, String(outcome.failure)).toMatchObject({ _tag: "InvalidInput" })
                      expect(mustServe, `${type} for a subject of ${subject.length}`).toBe(false)
                      return
                    }
                    expect(served, type).not.toBe("never")
                    expect(outcome.success.seen).toEqual(yield* orderedIds(table, order))
                    expect(new Set(outcome.success.seen).size).toBe(ids.length)
                  }),
                  services
                ))
            ),
            { numRuns: 60 }
          )
        )
      }))

    it.effect("each type's longest values are served, and their text is within the bound the catalog gives the type", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE extremes (
                     id bigserial PRIMARY KEY, at_tz timestamptz NOT NULL, at_local timestamp NOT NULL, day date NOT NULL,
                     small int2 NOT NULL, medium int4 NOT NULL, big int8 NOT NULL, amount numeric(6, 3) NOT NULL,
                     tiny numeric(3, 5) NOT NULL, round numeric(2, -3) NOT NULL, u uuid NOT NULL UNIQUE)`
        yield* sql`INSERT INTO extremes (at_tz, at_local, day, small, medium, big, amount, tiny, round, u) VALUES
          ('294276-12-31 23:59:59.999999+00', '294276-12-31 23:59:59.999999', '294276-12-31',
           -32768, -2147483648, -9223372036854775808, -999.999, -0.00999, -99000, gen_random_uuid()),
          ('4714-11-24 00:00:00+00 BC', '4714-11-24 00:00:00 BC', '4714-11-24 BC', 0, 0, 0, 0, 0, 0, gen_random_uuid()),
          ('-infinity', '-infinity', '-infinity', 0, 0, 0, 'NaN', 'NaN', 'NaN', gen_random_uuid())`
        for (const [column] of EXTREME_COLUMNS) {
          for (const direction of ["asc", "desc"] as const) {
            const order = { column, tieBreaker: "u", direction }
            const { seen } = yield* traverse({ table: "extremes", subject: "s", order, limit: 1 })
            expect(seen, column).toEqual(yield* orderedIds("extremes", order))
          }
        }
        // Each column's longest position text, against the bound the catalog derives from its type.
        for (const [column, type] of EXTREME_COLUMNS) {
          const [row] = yield* sql<{ longest: number; typmod: number }>`
            SELECT (SELECT max(octet_length(${
            positionText(sql, type, sql`t.${sql(column)}`)
          })) FROM extremes t) AS longest,
                   (SELECT atttypmod FROM pg_attribute WHERE attrelid = 'extremes'::regclass AND attname = ${column}) AS typmod`
          expect(row!.longest, column).toBeLessThanOrEqual(positionBytes(type, row!.typmod)!)
        }
      }))
  })
})

describe("Keyset property", () => {
  it.layer(Live)((it) => {
    it.effect("any rows, page size, direction and tie-breaker, pages from any session: the traversal is ORDER BY over the same rows", () =>
      Effect.gen(function*() {
        // Each case runs with the block's services; fast-check drives the cases and shrinks.
        const services = yield* Effect.context<SqlClient.SqlClient | Keyset.Keyset | Elsewhere>()
        yield* Effect.promise(() =>
          FastCheck.assert(
            FastCheck.asyncProperty(
              FastCheck.record({
                type: FastCheck.constantFrom(...PROPERTY_TYPES),
                values: FastCheck.array(FastCheck.integer({ min: -6, max: 6 }), { maxLength: 40 }),
                limit: FastCheck.integer({ min: 1, max: 9 }),
                direction: FastCheck.constantFrom("asc" as const, "desc" as const),
                tieBreaker: FastCheck.constantFrom("id", "k"),
                elsewhere: FastCheck.array(FastCheck.boolean(), { minLength: 1, maxLength: 6 })
              }),
              ({ direction, elsewhere, limit, tieBreaker, type, values }) =>
                Effect.runPromise(Effect.provideContext(
                  Effect.gen(function*() {
                    const sql = yield* SqlClient.SqlClient
                    const there = yield* Elsewhere
                    const table = `prop_${type}`
                    yield* sql.unsafe(`TRUNCATE ${table}`)
                    yield* sql.unsafe(
                      `INSERT INTO ${table} (v) SELECT ${PROPERTY_VALUES[type]} FROM unnest($1::int[]) AS x`,
                      [values]
                    )
                    const order = { column: "v", tieBreaker, direction }
                    const { pages, seen } = yield* traverse({ table, subject: "s", order, limit }, {
                      via: (page) =>
                        elsewhere[(page - 1) % elsewhere.length] ? Effect.succeed(there.keyset) : Keyset.Keyset
                    })
                    expect(seen).toEqual(yield* orderedIds(table, order))
                    expect(pages).toBe(Math.max(1, Math.ceil(values.length / limit)))
                  }),
                  services
                ))
            ),
            { numRuns: 60 }
          )
        )
      }))
  })
})
