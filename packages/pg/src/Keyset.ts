/**
 * Stable keyset pages over a caller-owned table ordered `(created_at DESC, id DESC)`. The
 * first page records the newest position as a high-water mark and later pages never go
 * above it, so rows created during a traversal do not shift it or appear in it. Cursors are
 * signed (`@effect-durable/core/Cursor`) and bound to the subject and the filters: a cursor
 * presented for another subject or other filters is refused before any SQL runs.
 *
 * @since 0.1.0
 */
import * as Cursor from "@effect-durable/core/Cursor"
import {
  type CursorBindingMismatch,
  type DatabaseError,
  DurableConfigError,
  type InvalidCursor,
  InvalidInput,
  type UnsupportedJsonValue
} from "@effect-durable/core/Errors"
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as Input from "@effect-durable/core/Input"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { classifySqlErrors } from "./ErrorClassification.js"
import { quote } from "./internal/sqlText.js"
import { traced } from "./internal/traced.js"

export type FilterValue = string | number | boolean | null

export interface PageRequest {
  /** Schema of the table; default: the connection's `search_path`. */
  readonly schema?: string
  readonly table: string
  /** Whom the traversal is for; a cursor only works for the subject it was issued to. */
  readonly subject: string
  /** Equality filters (`null` means `IS NULL`); part of the cursor's binding. */
  readonly where?: Readonly<Record<string, FilterValue>>
  /** Page size, 1-1000. */
  readonly limit: number
  /** The `nextCursor` of the previous page; absent for the first page. */
  readonly cursor?: string
}

export interface Page<Row> {
  readonly items: ReadonlyArray<Row>
  /** Present when more rows follow. */
  readonly nextCursor: string | undefined
}

export type PageError =
  | InvalidCursor
  | CursorBindingMismatch
  | InvalidInput
  | UnsupportedJsonValue
  | DatabaseError
  | DurableConfigError

export class Keyset extends Context.Tag("@effect-durable/pg/Keyset")<Keyset, {
  readonly page: <Row = Record<string, unknown>>(request: PageRequest) => Effect.Effect<Page<Row>, PageError>
}>() {}

const MAX_LIMIT = 1000
const identifier = (argument: string, name: unknown) => Input.argument(argument, Input.Identifier)(name)
// Positions are read as text with microseconds: a JavaScript Date would drop them.
const POSITION_AT = `"__effect_durable_created_at"`
const POSITION_ID = `"__effect_durable_id"`

export const make: Effect.Effect<Keyset["Type"], never, SqlClient.SqlClient | Cursor.CursorCodec> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const codec = yield* Cursor.CursorCodec

    const page = <Row>(request: PageRequest) =>
      Effect.gen(function*() {
        const schema = request.schema === undefined ? undefined : yield* identifier("schema", request.schema)
        const table = yield* identifier("table", request.table)
        const where = request.where ?? {}
        for (const column of Object.keys(where)) yield* identifier(`where.${column}`, column)
        if (!Number.isInteger(request.limit) || request.limit < 1 || request.limit > MAX_LIMIT) {
          return yield* new InvalidInput({ argument: "limit", rule: `an integer from 1 to ${MAX_LIMIT}` })
        }
        const filter = yield* Fingerprint.fingerprint({ schema: schema ?? null, table, where })
        // Binding is checked before any SQL: a foreign cursor learns nothing about the table.
        const cursor = request.cursor === undefined
          ? undefined
          : yield* codec.bind(request.cursor, request.subject, filter)

        const qualified = sql.literal(schema === undefined ? quote(table) : `${quote(schema)}.${quote(table)}`)
        const conditions = [
          ...Object.entries(where).map(([column, value]) =>
            value === null ? sql`${sql(column)} IS NULL` : sql`${sql(column)} = ${value}`
          ),
          ...(cursor === undefined ? [] : [
            sql`(created_at, id) <= (${cursor.highWater.createdAt}::timestamptz, ${cursor.highWater.id})`,
            ...(cursor.after === undefined
              ? []
              : [sql`(created_at, id) < (${cursor.after.createdAt}::timestamptz, ${cursor.after.id})`])
          ])
        ]
        const rows = yield* sql<Record<string, unknown>>`
          SELECT t.*,
                 to_char(t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS ${sql.literal(POSITION_AT)},
                 t.id::text AS ${sql.literal(POSITION_ID)}
            FROM ${qualified} t
           WHERE ${conditions.length === 0 ? sql`true` : sql.and(conditions)}
           ORDER BY t.created_at DESC, t.id DESC
           LIMIT ${request.limit + 1}`.pipe(classifySqlErrors("Keyset.page"))

        const position = (row: Record<string, unknown>): Cursor.Position => ({
          createdAt: String(row.__effect_durable_created_at),
          id: String(row.__effect_durable_id)
        })
        const served = rows.slice(0, request.limit)
        const items = served.map(({ __effect_durable_created_at: _at, __effect_durable_id: _id, ...item }) => item as Row)
        if (rows.length <= request.limit) return { items, nextCursor: undefined }
        const base = cursor ?? Cursor.firstPage(request.subject, filter, position(served[0]!))
        const nextCursor = yield* codec.encode(Cursor.nextPage(base, position(served[served.length - 1]!)))
        return { items, nextCursor }
      })

    return Keyset.of(traced("Keyset", { page }))
  }
)

export const layer: Layer.Layer<Keyset, never, SqlClient.SqlClient | Cursor.CursorCodec> = Layer.effect(Keyset, make)

/**
 * The `Keyset` of a substrate built without cursor keys (`Durable.layer` with no
 * `cursorKeys`, `layerConfig` with no `CURSOR_KEYS`): every page fails, saying what to set.
 */
export const layerWithoutKeys: Layer.Layer<Keyset> = Layer.succeed(
  Keyset,
  Keyset.of({
    page: () =>
      Effect.fail(
        new DurableConfigError({
          field: "CURSOR_KEYS",
          rule: "signing keys (id=secret[,id=secret...], secrets of at least 16 bytes) are needed to page with signed cursors"
        })
      )
  })
)
