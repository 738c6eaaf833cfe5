/**
 * A page request decoded before any SQL runs (each argument by its rule, into `InvalidInput`
 * naming it), and the binding a cursor carries: the fingerprint of everything that decides
 * which rows a traversal visits besides the subject — table, order, equality filters, and the
 * caller's SQL filter as its compiled text and parameter values.
 */
import * as Cursor from "@effect-durable/core/Cursor"
import { InvalidInput } from "@effect-durable/core/Errors"
import { canonicalizeResult, fingerprintOfCanonical, type RequestFingerprint } from "@effect-durable/core/Fingerprint"
import * as Input from "@effect-durable/core/Input"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type * as SqlClient from "effect/sql/SqlClient"
import * as Statement from "effect/sql/Statement"
import type { Defaults, FilterValue, PageRequest } from "../../Keyset.js"
import type { Target } from "./catalog.js"

/** A request whose every argument passed its rule. */
export interface Query extends Target {
  readonly subject: string
  readonly direction: "asc" | "desc"
  readonly where: ReadonlyArray<readonly [column: string, value: FilterValue]>
  readonly filter: Statement.Fragment | undefined
  readonly limit: number
  /** The bounds the caller declared on text columns nothing else bounds, in characters. */
  readonly maxLength: { readonly column: number | undefined; readonly tieBreaker: number | undefined }
}

// Declared rather than a union: a union reports its first member's complaint, not the rule.
const FilterValueSchema = Schema.declare(
  (value: unknown): value is FilterValue =>
    value === null || typeof value === "boolean" ||
    (typeof value === "number" && Number.isFinite(value)) ||
    (typeof value === "string" && !value.includes("\u0000") && Input.isWellFormed(value))
).annotate({ message: "a string without NUL or lone surrogates, a finite number, a boolean or null" })

const Direction = Schema.declare((value: unknown): value is "asc" | "desc" => value === "asc" || value === "desc")
  .annotate({ message: `"asc" or "desc"` })

/**
 * The decoder of page requests under these defaults: every argument checked by its rule, the
 * first broken one reported. Build it once; its schemas are compiled here.
 */
export const decoder = (defaults: typeof Defaults) => {
  const decodeSchema = Input.argumentResult("schema", Input.Identifier)
  const decodeTable = Input.argumentResult("table", Input.Identifier)
  const decodeSubject = Input.argumentResult("subject", Cursor.Subject)
  const decodeOrder = Input.argumentResult(
    "order",
    Schema.Struct({
      column: Input.Identifier.pipe(Schema.withDecodingDefaultType(Effect.sync(() => defaults.column))),
      tieBreaker: Input.Identifier.pipe(Schema.withDecodingDefaultType(Effect.sync(() => defaults.tieBreaker))),
      direction: Direction.pipe(Schema.withDecodingDefaultType(Effect.sync(() => defaults.direction))),
      maxLength: Schema.optionalKey(Schema.Struct({
        column: Schema.optionalKey(Input.Count(Cursor.MAX_TOKEN_LENGTH)),
        tieBreaker: Schema.optionalKey(Input.Count(Cursor.MAX_TOKEN_LENGTH))
      }))
    })
  )
  // Column by column: a record schema would drop a key that is no identifier, not refuse it.
  const decodeColumn = Input.argumentResult("where", Input.Identifier)
  const decodeValue = Input.argumentResult("where", FilterValueSchema)
  const decodeWhere = (where: Readonly<Record<string, unknown>>) =>
    Result.all(
      Object.entries(where).map(([column, value]) =>
        Result.mapError(
          Result.all([decodeColumn(column), decodeValue(value)] as const),
          (error) => new InvalidInput({ argument: `where.${column}`, rule: error.rule })
        )
      )
    )
  const decodeLimit = Input.argumentResult("limit", Input.Count(defaults.maxLimit))

  return (request: PageRequest): Result.Result<Query, InvalidInput> =>
    Result.gen(function*() {
      const schema = request.schema === undefined ? null : yield* decodeSchema(request.schema)
      const table = yield* decodeTable(request.table)
      const subject = yield* decodeSubject(request.subject)
      const order = yield* decodeOrder(request.order ?? {})
      const where = yield* decodeWhere(request.where ?? {})
      if (request.filter !== undefined && !Statement.isFragment(request.filter)) {
        return yield* Result.fail(
          new InvalidInput({
            argument: "filter",
            rule: "an SQL fragment written with the request's SqlClient (sql`...`)"
          })
        )
      }
      const limit = yield* decodeLimit(request.limit)
      return {
        schema,
        table,
        subject,
        column: order.column,
        tieBreaker: order.tieBreaker,
        direction: order.direction,
        where,
        filter: request.filter,
        limit,
        maxLength: { column: order.maxLength?.column, tieBreaker: order.maxLength?.tieBreaker }
      }
    })
}

const refuseParameter = (index: number, rule: string) =>
  Result.fail(new InvalidInput({ argument: "filter", rule: `parameter $${index + 1}: ${rule}` }))

// Parameter values as JSON can carry them. Dates, bigints and bytes become the text the
// database reads them as, so equal filters always fingerprint alike.
const parameterValue = (value: unknown, index: number): Result.Result<unknown, InvalidInput> => {
  if (value === null || value === undefined) return Result.succeed(null)
  if (typeof value === "string") {
    return value.includes("\u0000")
      ? refuseParameter(index, "a string without NUL (PostgreSQL text cannot hold it)")
      : Result.succeed(value)
  }
  if (typeof value === "number") return Result.succeed(Number.isFinite(value) ? value : String(value))
  if (typeof value === "bigint") return Result.succeed(value.toString())
  if (value instanceof Date) {
    return Number.isNaN(value.getTime()) ? refuseParameter(index, "a valid Date") : Result.succeed(value.toISOString())
  }
  if (value instanceof Uint8Array) return Result.succeed(`\\x${Buffer.from(value).toString("hex")}`)
  if (Array.isArray(value)) return Result.all(value.map((element) => parameterValue(element, index)))
  return Result.succeed(value)
}

const filterBinding = (sql: SqlClient.SqlClient, filter: Statement.Fragment) =>
  Result.gen(function*() {
    const [text, parameters] = yield* Result.try({
      try: () => sql`${filter}`.compile(),
      catch: (error) =>
        new InvalidInput({ argument: "filter", rule: `an SQL fragment this client compiles (${String(error)})` })
    })
    return { text, parameters: yield* Result.all(parameters.map(parameterValue)) }
  })

/** The fingerprint a cursor is bound to (with its subject): same query, same fingerprint. */
export const binding = (sql: SqlClient.SqlClient, query: Query): Result.Result<RequestFingerprint, InvalidInput> =>
  Result.gen(function*() {
    const filter = query.filter === undefined ? null : yield* filterBinding(sql, query.filter)
    const canonical = yield* Result.mapError(
      canonicalizeResult({
        schema: query.schema,
        table: query.table,
        order: {
          column: query.column,
          tieBreaker: query.tieBreaker,
          direction: query.direction,
          // Only when declared: a cursor issued without one binds as it always did.
          ...(query.maxLength.column === undefined && query.maxLength.tieBreaker === undefined
            ? {}
            : { maxLength: Object.fromEntries(Object.entries(query.maxLength).filter(([, n]) => n !== undefined)) })
        },
        where: Object.fromEntries(query.where),
        filter
      }),
      // The rest was decoded already: only a filter's parameter can still be something JSON is not.
      (error) => new InvalidInput({ argument: "filter", rule: error.message })
    )
    return fingerprintOfCanonical(canonical)
  })
