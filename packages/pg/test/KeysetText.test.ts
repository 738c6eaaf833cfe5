import * as Cursor from "@effect-durable/core/Cursor"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as SqlClient from "effect/sql/SqlClient"
import * as FastCheck from "fast-check"
import { checkBound } from "../src/internal/keyset/bounds.js"
import * as Keyset from "../src/Keyset.js"
import { countingStatements, idsOf, orderedIds, refusal, traverse } from "./keysetSupport.js"
import { database } from "./support.js"

// The ids people have: text (Prisma's String), char(26) and text ULIDs, unbounded varchar
// (Rails, TypeORM), citext, and domains over them — each paged without changing its type.
const Live = Keyset.layer.pipe(
  Layer.provideMerge(Cursor.layer([{ id: "k1", secret: Redacted.make("keyset-text-secret-32-bytes-long") }])),
  Layer.provideMerge(database())
)

const createTable = (table: string, idType: string, ids: ReadonlyArray<string>, extra = "") =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all([
      sql.unsafe(`DROP TABLE IF EXISTS ${table}`),
      // Three creation times, so that the tie-breaker orders most pages.
      sql.unsafe(`CREATE TABLE ${table} (id ${idType} PRIMARY KEY, created_at timestamptz NOT NULL${extra})`),
      sql.unsafe(
        `INSERT INTO ${table} SELECT id, timestamptz '2026-01-01' + (n % 3) * interval '1 hour'
           FROM unnest($1::text[]) WITH ORDINALITY AS x(id, n)`,
        [ids]
      )
    ], { discard: true }))

// A char(n) id comes back padded to n; `::text` (what ORDER BY's ids are read as) trims it.
const trimmed = (ids: ReadonlyArray<string>) => ids.map((id) => id.trimEnd())

const bothWays = (table: string, request: Partial<Keyset.PageRequest> = {}, limit = 2) =>
  Effect.forEach(["asc", "desc"] as const, (direction) =>
    Effect.gen(function*() {
      const order = { column: "created_at", tieBreaker: "id", direction, ...request.order }
      const { seen } = yield* traverse({ table, subject: "s", limit, ...request, order })
      expect(trimmed(seen), `${table} ${direction}`).toEqual(
        trimmed(yield* orderedIds(table, { column: "created_at", tieBreaker: "id", direction }))
      )
    }))

// ULID-like ids of 26 characters, a few shorter (char(n) pads them), mixed case for citext.
const ULIDS = Array.from(
  { length: 9 },
  (_, i) => `01J${String(i).padStart(2, "0")}Xq${"Z".repeat(i % 3 === 0 ? 19 : 8)}`
)

describe("Keyset over text ids", () => {
  it.layer(Live)((it) => {
    it.effect("char(n), citext, domains (nested too) and text under a validated CHECK page whole, both directions, without a schema change", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE EXTENSION IF NOT EXISTS citext`
        yield* sql`CREATE DOMAIN ulid_v AS varchar(64)`
        yield* sql`CREATE DOMAIN ulid_nested AS ulid_v`
        yield* sql`CREATE DOMAIN ulid_t AS text CHECK (length(VALUE) <= 26)`
        yield* sql`CREATE DOMAIN ulid_ci AS citext CHECK (char_length(VALUE) < 27) NOT NULL`
        const tables = [
          ["ids_char", "char(26)", ""],
          ["ids_domain", "ulid_v", ""],
          ["ids_nested", "ulid_nested", ""],
          ["ids_domain_check", "ulid_t", ""],
          ["ids_citext_domain", "ulid_ci", ""],
          ["ids_check", "text", ", CONSTRAINT id_len CHECK ((length(id) >= 1) AND (length(id) <= 26))"],
          ["ids_varchar_check", "varchar", ", CHECK (octet_length(id) <= 40)"],
          ["ids_citext_check", "citext", ", CHECK (length(id) <= 26)"]
        ] as const
        for (const [table, type, extra] of tables) {
          yield* createTable(table, type, ULIDS, extra)
          yield* bothWays(table)
        }
      }))

    it.effect("a CHECK that does not hold for every row of the column bounds nothing: NOT VALID, under an OR, of another expression", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        const sql = yield* SqlClient.SqlClient
        for (
          const [table, check] of [
            ["unbound_or", "CHECK (length(id) <= 26 OR id LIKE 'x%')"],
            ["unbound_lower", "CHECK (length(lower(id) || id) <= 52)"],
            ["unbound_not_valid", ""]
          ] as const
        ) {
          yield* createTable(table, "text", ULIDS, check === "" ? "" : `, ${check}`)
          if (check === "") {
            yield* sql.unsafe(`ALTER TABLE ${table} ADD CONSTRAINT id_len CHECK (length(id) <= 26) NOT VALID`)
          }
          const { error, statements } = yield* refusal(keyset.page({ table, subject: "s", limit: 2 }))
          expect(error, table).toMatchObject({ _tag: "InvalidInput", argument: "order.tieBreaker" })
          expect((error as { rule: string }).rule).toMatch(/order\.maxLength\.tieBreaker.*VALIDATE CONSTRAINT/)
          expect(statements, table).toBe(1)
        }
        // Validated, the same constraint bounds the column: a refusal is not kept, the next page 1 pages.
        yield* sql`ALTER TABLE unbound_not_valid VALIDATE CONSTRAINT id_len`
        yield* bothWays("unbound_not_valid")
      }))

    it.effect("a bound you declare on a text column: served whole when every row keeps it; a row past it refuses page 1 before any row is served", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        yield* createTable("declared", "text", ULIDS)
        yield* bothWays("declared", { order: { maxLength: { tieBreaker: 26 } } })
        yield* createTable("declared_past", "text", [...ULIDS, "x".repeat(27)])
        for (const direction of ["asc", "desc"] as const) {
          const { error, statements } = yield* refusal(
            keyset.page({
              table: "declared_past",
              subject: "s",
              limit: 50,
              order: { direction, maxLength: { tieBreaker: 26 } }
            })
          )
          expect(error).toMatchObject({ _tag: "InvalidInput", argument: "order.maxLength.tieBreaker" })
          expect((error as { rule: string }).rule).toMatch(/has 27 characters there, past the 26 declared/)
          // The page's one statement (after the catalog's, on the first call): refused, no row served.
          expect(statements).toBe(direction === "asc" ? 2 : 1)
        }
        // A bound past what a cursor carries is refused before any page is read.
        const wide = yield* refusal(
          keyset.page({ table: "declared", subject: "s", limit: 2, order: { maxLength: { tieBreaker: 5000 } } })
        )
        expect(wide.error).toMatchObject({ _tag: "InvalidInput", argument: "order.tieBreaker" })
        // A declared bound is a count of characters.
        const zero = yield* Effect.flip(
          keyset.page({ table: "declared", subject: "s", limit: 2, order: { maxLength: { tieBreaker: 0 } } })
        )
        expect(zero).toMatchObject({ _tag: "InvalidInput", argument: "order.maxLength.tieBreaker" })
      }))

    it.effect("what looks like a bound and is not: a NOT NULL domain on a nullable column, a NO INHERIT CHECK; a refusal for a too-wide CHECK is not kept", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        const sql = yield* SqlClient.SqlClient
        // A domain's NOT NULL lets a NULL in (a scalar subquery that finds no row): only the column's counts.
        yield* sql`CREATE DOMAIN required_id AS varchar(26) NOT NULL`
        yield* sql`CREATE TABLE domain_null (id required_id UNIQUE, created_at timestamptz NOT NULL)`
        const nullable = yield* Effect.flip(keyset.page({ table: "domain_null", subject: "s", limit: 2 }))
        expect(nullable).toMatchObject({ _tag: "InvalidInput", argument: "order.tieBreaker" })
        expect(nullable.message).toMatch(/NOT NULL/)
        yield* createTable("no_inherit", "text", ULIDS, ", CHECK (length(id) <= 26) NO INHERIT")
        expect(yield* Effect.flip(keyset.page({ table: "no_inherit", subject: "s", limit: 2 }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "order.tieBreaker"
        })
        // Too wide for a cursor: refused naming the tie-breaker; the tighter CHECK the refusal asks for then pages.
        yield* createTable("wide_check", "text", ULIDS, ", CONSTRAINT wide CHECK (length(id) <= 2000)")
        expect(yield* Effect.flip(keyset.page({ table: "wide_check", subject: "s", limit: 2 }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "order.tieBreaker"
        })
        yield* sql`ALTER TABLE wide_check DROP CONSTRAINT wide, ADD CONSTRAINT narrow CHECK (length(id) <= 26)`
        yield* bothWays("wide_check")
        // A cursor is bound to the bound declared with it.
        yield* createTable("bound_cursor", "text", ULIDS)
        const order = { maxLength: { tieBreaker: 26 } }
        const first = yield* keyset.page({ table: "bound_cursor", subject: "s", limit: 2, order })
        const other = yield* Effect.flip(
          keyset.page({
            table: "bound_cursor",
            subject: "s",
            limit: 2,
            order: { maxLength: { tieBreaker: 30 } },
            cursor: first.nextCursor!
          })
        )
        expect(other).toMatchObject({ _tag: "CursorBindingMismatch" })
      }))

    it.effect("under a declared bound, a longer row written during the traversal refuses the page that would carry it, typed", () =>
      Effect.gen(function*() {
        const keyset = yield* Keyset.Keyset
        const sql = yield* SqlClient.SqlClient
        yield* createTable("declared_mid", "text", ULIDS)
        const order = { direction: "asc" as const, maxLength: { tieBreaker: 26 } }
        const first = yield* keyset.page({ table: "declared_mid", subject: "s", limit: 2, order })
        // Within the high-water mark, after the cursor: a row the traversal would still serve.
        yield* sql`INSERT INTO declared_mid VALUES (${"0".repeat(40)}, timestamptz '2026-01-01 01:00')`
        const { result } = yield* countingStatements(
          Effect.gen(function*() {
            let cursor = first.nextCursor
            while (cursor !== undefined) {
              cursor = (yield* keyset.page({ table: "declared_mid", subject: "s", limit: 2, order, cursor })).nextCursor
            }
          })
        )
        expect(Result.isFailure(result) && result.failure).toMatchObject({
          _tag: "InvalidInput",
          argument: "order.maxLength.tieBreaker"
        })
      }))

    it.effect("any ids, lengths, characters and bound, each kind of bound, any page size and direction: every row once, in order, or refused before page 1", () =>
      Effect.gen(function*() {
        const services = yield* Effect.context<SqlClient.SqlClient | Keyset.Keyset>()
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE EXTENSION IF NOT EXISTS citext`
        yield* sql`CREATE DOMAIN prop_ulid AS text CHECK (length(VALUE) <= 40)`
        // What bounds the column at 40 characters, and how the table is made (its id column).
        const kinds = {
          char: { type: "char(40)", extra: "", maxLength: undefined },
          domain: { type: "prop_ulid", extra: "", maxLength: undefined },
          check: { type: "text", extra: ", CHECK (length(id) <= 40)", maxLength: undefined },
          citext: { type: "citext", extra: ", CHECK (length(id) <= 40)", maxLength: undefined },
          declared: { type: "text", extra: "", maxLength: 40 },
          declaredVarchar: { type: "varchar", extra: "", maxLength: 40 }
        } as const
        yield* Effect.promise(() =>
          FastCheck.assert(
            FastCheck.asyncProperty(
              FastCheck.record({
                kind: FastCheck.constantFrom(...(Object.keys(kinds) as Array<keyof typeof kinds>)),
                lengths: FastCheck.array(FastCheck.integer({ min: 3, max: 48 }), { maxLength: 10 }),
                units: FastCheck.array(FastCheck.constantFrom("a", "A", " ", "é", "😀", "\u0001", "\"", "\\"), {
                  minLength: 1,
                  maxLength: 3
                }),
                limit: FastCheck.integer({ min: 1, max: 4 }),
                direction: FastCheck.constantFrom("asc" as const, "desc" as const)
              }),
              ({ direction, kind, lengths, limit, units }) =>
                Effect.runPromise(Effect.provideContext(
                  Effect.gen(function*() {
                    const { extra, maxLength, type } = kinds[kind]
                    const declared = maxLength !== undefined
                    // A schema's bound keeps longer ids out of the table; a declared one does not.
                    const ids = idsOf(lengths.map((length) => declared ? length : Math.min(length, 40)), units)
                      // char(n) pads: ids differing only in trailing spaces are one id there.
                      .map((id) => type.startsWith("char") ? id.trimEnd() : id)
                    const unique = [...new Set(ids)]
                    const table = `prop_text_${kind.toLowerCase()}`
                    const inserted = yield* Effect.result(createTable(table, type, unique, extra))
                    expect(Result.isSuccess(inserted), String(inserted)).toBe(true)
                    const order = { column: "created_at", tieBreaker: "id", direction }
                    let pagesServed = 0
                    const outcome = yield* Effect.result(traverse({
                      table,
                      subject: "s",
                      limit,
                      order: maxLength === undefined ? order : { ...order, maxLength: { tieBreaker: maxLength } }
                    }, { between: (page) => Effect.sync(() => void (pagesServed = page)) }))
                    const pastBound = unique.some((id) => [...id].length > 40)
                    if (Result.isFailure(outcome)) {
                      expect(pagesServed).toBe(0)
                      expect(outcome.failure).toMatchObject({
                        _tag: "InvalidInput",
                        argument: "order.maxLength.tieBreaker"
                      })
                      expect(pastBound).toBe(true)
                      return
                    }
                    expect(pastBound).toBe(false)
                    expect(trimmed(outcome.success.seen)).toEqual(trimmed(yield* orderedIds(table, order)))
                    expect(new Set(outcome.success.seen).size).toBe(unique.length)
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

describe("A CHECK constraint's length bound, as pg_get_constraintdef writes it", () => {
  it("a bound is a conjunct over the value alone, <= or <; anything else bounds nothing", () => {
    const subjects = ["id", "\"Order Id\"", "VALUE"]
    expect(checkBound(["CHECK ((length(id) <= 26))"], subjects)).toBe(26)
    expect(checkBound(["CHECK ((length((id)::text) < 27))"], subjects)).toBe(26)
    expect(checkBound(["CHECK (((length(id) >= 1) AND (char_length(id) <= 30)))"], subjects)).toBe(30)
    expect(checkBound(["CHECK ((octet_length((VALUE)::text) <= 64))"], subjects)).toBe(64)
    expect(checkBound(["CHECK ((length((\"Order Id\")::text) <= 12))"], subjects)).toBe(12)
    expect(checkBound(["CHECK ((length(id) <= 40))", "CHECK ((length(id) <= 26))"], subjects)).toBe(26)
    expect(checkBound(["CHECK (((length(id) <= 26) OR (id ~~ 'x%'::text)))"], subjects)).toBeUndefined()
    expect(checkBound(["CHECK ((length(lower(id)) <= 26))"], subjects)).toBeUndefined()
    expect(checkBound(["CHECK ((length(other) <= 26))"], subjects)).toBeUndefined()
    expect(checkBound(["CHECK ((length(id) >= 26))"], subjects)).toBeUndefined()
    expect(checkBound(["CHECK ((id <> 'a AND length(id) <= 3'::text))"], subjects)).toBeUndefined()
    // Casts the author wrote measure something else: bpchar drops trailing blanks, name truncates.
    expect(checkBound(["CHECK ((length((id)::bpchar) <= 5))"], subjects)).toBeUndefined()
    expect(checkBound(["CHECK ((length((id)::name) <= 5))"], subjects)).toBeUndefined()
    // NO INHERIT does not hold in the children a page reads too.
    expect(checkBound(["CHECK ((length(id) <= 5)) NO INHERIT"], subjects)).toBeUndefined()
  })
})
