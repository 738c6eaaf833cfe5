/**
 * Compare-and-swap on caller-owned rows that carry a `revision` column: the update happens
 * only when the row is still at the expected revision, and bumps it. Lost updates become a
 * `CasConflict` the caller can act on. Table and column names are validated lowercase
 * identifiers and quoted; values are always bound parameters.
 *
 * @since 0.1.0
 */
import { CasConflict, type DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { quote } from "./internal/sqlText.js"
import { bounded } from "./internal/transaction.js"

/** A value bound as a parameter (for a `jsonb` column pass `JSON.stringify(value)`). */
export type CasValue = string | number | bigint | boolean | Date | Uint8Array | null

export interface CasUpdate {
  /** Schema of the table; default: the connection's `search_path`. */
  readonly schema?: string
  readonly table: string
  /** Key column; default `id`. */
  readonly idColumn?: string
  readonly id: string | number | bigint
  /** Revision column (an integer type); default `revision`. */
  readonly revisionColumn?: string
  readonly expectedRevision: number | bigint
  /** Columns to set, with their new values (bound as parameters). */
  readonly set: Readonly<Record<string, CasValue>>
}

export class Cas extends Context.Service<Cas, {
  /** Applies `set` if the row is at `expectedRevision`; returns the new revision. */
  readonly update: (update: CasUpdate) => Effect.Effect<bigint, CasConflict | InvalidInput | DatabaseError>
}>()("@effect-durable/pg/Cas") {}

const identifier = (argument: string, name: unknown) => Input.argument(argument, Input.Identifier)(name)

/** A value PostgreSQL can take as a parameter: text without NUL, a finite number, a valid date. */
const Value = Schema.Union([
  Schema.Null,
  Schema.Boolean,
  Schema.BigInt,
  Schema.Uint8Array,
  Schema.Number.check(Schema.makeFilter(Number.isFinite, { message: "a finite number" })),
  Schema.String.check(Schema.makeFilter((text) => !text.includes("\u0000"), { message: "text without NUL" })),
  Schema.Date.check(Schema.makeFilter((date) => !Number.isNaN(date.getTime()), { message: "a valid date" }))
]).annotate({ message: "text without NUL, a finite number, a bigint, a boolean, a valid Date, bytes or null" })
const decodeValue = (column: string) => Input.argument(`set.${column}`, Value)
const decodeId = Input.argument(
  "id",
  Schema.Union([
    Input.Text(1024),
    Schema.BigInt,
    Schema.Number.check(Schema.makeFilter(Number.isSafeInteger, { message: "a safe integer" }))
  ])
    .annotate({ message: "a non-empty string without NUL, a safe integer or a bigint" })
)

const validateUpdate = (update: CasUpdate) =>
  Effect.gen(function*() {
    const schema = update.schema === undefined ? undefined : yield* identifier("schema", update.schema)
    const table = yield* identifier("table", update.table)
    const idColumn = yield* identifier("idColumn", update.idColumn ?? "id")
    const revisionColumn = yield* identifier("revisionColumn", update.revisionColumn ?? "revision")
    const columns = Object.keys(update.set)
    if (columns.length === 0) return yield* new InvalidInput({ argument: "set", rule: "at least one column" })
    for (const column of columns) {
      yield* identifier(`set.${column}`, column)
      if (column === revisionColumn || column === idColumn) {
        return yield* new InvalidInput({
          argument: `set.${column}`,
          rule: "the key and revision columns are not set by hand"
        })
      }
      yield* decodeValue(column)(update.set[column])
    }
    yield* decodeId(update.id)
    if (typeof update.expectedRevision !== "bigint" && !Number.isSafeInteger(update.expectedRevision)) {
      return yield* new InvalidInput({ argument: "expectedRevision", rule: "an integer" })
    }
    const qualified = schema === undefined ? quote(table) : `${quote(schema)}.${quote(table)}`
    return { qualified, idColumn, revisionColumn, columns }
  })

export const make: Effect.Effect<Cas["Service"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings

    const update = Effect.fn("Cas.update")(function*(request: CasUpdate) {
      const { columns, idColumn, qualified, revisionColumn } = yield* validateUpdate(request)
      const expected = BigInt(request.expectedRevision)
      const assignments = sql.csv(columns.map((column) => sql`${sql(column)} = ${request.set[column]!}`))
      const body = Effect.gen(function*() {
        const updated = yield* sql<{ revision: string }>`
        UPDATE ${sql.literal(qualified)}
           SET ${assignments}, ${sql(revisionColumn)} = ${sql(revisionColumn)} + 1
         WHERE ${sql(idColumn)} = ${request.id} AND ${sql(revisionColumn)} = ${expected.toString()}
        RETURNING ${sql(revisionColumn)}::text AS revision`
        if (updated[0] !== undefined) return BigInt(updated[0].revision)
        const current = yield* sql<{ revision: string }>`
        SELECT ${sql(revisionColumn)}::text AS revision FROM ${sql.literal(qualified)}
         WHERE ${sql(idColumn)} = ${request.id}`
        return yield* new CasConflict({
          table: request.table,
          id: String(request.id),
          expectedRevision: expected,
          actualRevision: current[0] === undefined ? null : BigInt(current[0].revision)
        })
      })
      return yield* bounded(sql, settings, "Cas.update", body)
    })

    return Cas.of({ update })
  }
)

export const layer: Layer.Layer<Cas, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(Cas, make)
