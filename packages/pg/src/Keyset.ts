/**
 * Stable keyset pages over a caller-owned table, in the order the caller picks: a sortable
 * NOT NULL column and a unique tie-breaker, newest or oldest first. The first page records a
 * high-water mark and later pages never go past it, so rows created during a traversal neither
 * shift it nor appear in it. Cursors are signed and bound to the subject, the table, the order
 * and the filters: a cursor presented for anything else is refused before any SQL runs.
 * A traversal is served to its end whatever its rows hold, or refused at its first page: the
 * ordered columns' values must have a bounded length so that a cursor carries any position
 * whole (a cursor's size is bounded) — by their type, a validated CHECK constraint, or a bound
 * the caller declares, which every page verifies against the rows.
 *
 * `Keyset.layer` takes its `CursorCodec` from you; `Durable`'s layers provide a `Keyset` only
 * when given cursor keys, so they never shadow the one you compose.
 *
 * @since 0.1.0
 */
import * as Cursor from "@effect-durable/core/Cursor"
import {
  type CursorBindingMismatch,
  type DatabaseError,
  DurableConfigError,
  type InvalidCursor,
  InvalidInput
} from "@effect-durable/core/Errors"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import * as Bounds from "./internal/keyset/bounded.js"
import * as Catalog from "./internal/keyset/catalog.js"
import { checkCapacity } from "./internal/keyset/positions.js"
import * as Request from "./internal/keyset/request.js"
import { readPage } from "./internal/keyset/statement.js"

/** An equality filter's value; `null` means `IS NULL`. */
export type FilterValue = string | number | boolean | null

/**
 * The order of a traversal. Both columns must be NOT NULL and of a type a position carries
 * exactly and whole: `timestamptz`, `timestamp`, `date`, `smallint`, `integer`, `bigint`,
 * `uuid`, `numeric(p, s)`, or a text type — `text`, `varchar`, `char(n)`, `citext`, or a domain
 * over one of these — whose length is bounded: by its type (`varchar(26)`, `char(26)`), by a
 * validated CHECK constraint on the column or its domain (`CHECK (length(id) <= 26)`), or by
 * `maxLength`. Positions must fit a cursor for the subject (`Cursor.positionCapacity`: 400
 * characters beside a timestamp always do). The tie-breaker must have a unique index of its own.
 */
export interface Order {
  /** The column pages are ordered by; default `created_at`. */
  readonly column?: string
  /** Orders the rows that share a `column` value; default `id`. */
  readonly tieBreaker?: string
  /** `desc` (default): largest first, the high-water mark is the first row served. `asc`: the
   * high-water mark is the largest position when the first page was read. */
  readonly direction?: "asc" | "desc"
  /**
   * The most characters a value of a text column has, declared by you for a column neither its
   * type nor a CHECK constraint bounds (a column they bound keeps their bound). Verified: a first
   * page is refused (`InvalidInput` naming `order.maxLength.column` or `.tieBreaker`) when any
   * row the traversal would serve is longer, before any row is served; every later page checks
   * its own rows again, so a longer row written during the traversal refuses the page that would
   * carry it rather than a cursor.
   */
  readonly maxLength?: { readonly column?: number; readonly tieBreaker?: number }
}

export interface PageRequest {
  /** Schema of the table; default: the connection's `search_path`. */
  readonly schema?: string
  readonly table: string
  /** Whom the traversal is for (1-256 UTF-8 bytes, no NUL); a cursor only works for its subject. */
  readonly subject: string
  readonly order?: Order
  /** Equality filters on columns (`null` means `IS NULL`); strings hold no NUL. */
  readonly where?: Readonly<Record<string, FilterValue>>
  /**
   * A condition of your own, written with the request's `SqlClient`, e.g.
   * sql`(sender = ${account} OR receiver = ${account})`: unqualified column names, values as
   * parameters. Its text and parameter values are part of the cursor's binding.
   */
  readonly filter?: Statement.Fragment
  /** Page size, 1-1000. */
  readonly limit: number
  /** The `nextCursor` of the previous page; absent for the first page. */
  readonly cursor?: string
}

export interface Page<Row> {
  /** The table's rows, as `SELECT *` reads them. */
  readonly items: ReadonlyArray<Row>
  /** Present when more rows follow. */
  readonly nextCursor: string | undefined
}

export type PageError = InvalidCursor | CursorBindingMismatch | InvalidInput | DatabaseError | DurableConfigError

export class Keyset extends Context.Service<Keyset, {
  readonly page: <Row = Record<string, unknown>>(request: PageRequest) => Effect.Effect<Page<Row>, PageError>
}>()("@effect-durable/pg/Keyset") {}

/** The order a request without `order` gets, and the largest page. */
export const Defaults = {
  column: "created_at",
  tieBreaker: "id",
  direction: "desc",
  maxLimit: 1000
} as const

const decode = Request.decoder(Defaults)

export const make: Effect.Effect<Keyset["Service"], never, SqlClient.SqlClient | Cursor.CursorCodec> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const codec = yield* Cursor.CursorCodec
    const catalog = yield* Catalog.make(sql)

    const page = Effect.fn("Keyset.page")(function*<Row>(request: PageRequest): Effect.fn.Return<Page<Row>, PageError> {
      const query = yield* Effect.fromResult(decode(request))
      const binding = yield* Effect.fromResult(Request.binding(sql, query))
      // Checked before any SQL: a foreign cursor learns nothing about the table.
      const cursor = request.cursor === undefined
        ? undefined
        : yield* codec.bind(request.cursor, query.subject, binding)
      const layout = yield* catalog.layout(query)
      // A refusal is not kept: the layout is looked up again (a CHECK may be validated since).
      const bounds = yield* Effect.fromResult(Bounds.effective(layout, query.maxLength)).pipe(
        Effect.tapError(() => catalog.forget(query))
      )
      yield* checkCapacity(query.subject, bounds.column, bounds.tieBreaker).pipe(
        Effect.tapError(() => catalog.forget(query))
      )
      const rows = yield* readPage(sql, query, layout, cursor, bounds.declared)
      yield* Effect.fromResult(Bounds.verify(layout, bounds.declared, rows))

      const served = rows.slice(0, query.limit)
      const items = served.map((row) => row.item as Row)
      if (rows.length <= query.limit) return { items, nextCursor: undefined }
      const first = served[0]!
      const started = cursor ??
        Cursor.firstPage(query.subject, binding, query.direction === "asc" ? first.highWater! : first.position)
      // checkCapacity bounded every position of the table for this subject, by the bounds
      // looked up when this layout was kept (or declared and verified above): a position that
      // does not fit means a column changed since (widened to text, a CHECK dropped). The layout
      // is forgotten, and the page refused, typed, naming the column whose position grew.
      const last = served[served.length - 1]!.position
      const nextCursor = yield* codec.encode(Cursor.nextPage(started, last)).pipe(
        Effect.catch(() =>
          Effect.andThen(
            catalog.forget(query),
            Effect.fail(
              new InvalidInput({
                argument: Bounds.grown(bounds, last),
                rule:
                  "a position of this table no longer fits a cursor: a column changed since the traversal began; start it again from its first page"
              })
            )
          )
        )
      )
      return { items, nextCursor }
    })

    return Keyset.of({ page })
  }
)

export const layer: Layer.Layer<Keyset, never, SqlClient.SqlClient | Cursor.CursorCodec> = Layer.effect(Keyset, make)
