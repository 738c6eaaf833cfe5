/**
 * What the keyset suites share: a traversal to its end, the order ORDER BY gives, how many
 * statements a call ran, and tables of ids of chosen lengths.
 */
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as SqlClient from "effect/sql/SqlClient"
import * as Statement from "effect/sql/Statement"
import * as Keyset from "../src/Keyset.js"

export type KeysetService = Keyset.Keyset["Service"]

/** The ids of the rows `ORDER BY` serves, as the traversal must serve them. */
export const orderedIds = (table: string, order: Required<Omit<Keyset.Order, "maxLength">>, where = "true") =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const direction = order.direction === "asc" ? "ASC" : "DESC"
    return Effect.map(
      // Qualified: a bare name in ORDER BY would mean the output column, id as text.
      sql.unsafe<{ id: string }>(
        `SELECT t.id::text AS id FROM ${table} t WHERE ${where}
          ORDER BY t.${order.column} ${direction}, t.${order.tieBreaker} ${direction}`
      ),
      (rows) => rows.map((row) => row.id)
    )
  })

export interface Traversal<R = never> {
  /** Runs after page `n` (from 1) was served, before the next is asked for. */
  readonly between?: (page: number, seen: ReadonlyArray<string>) => Effect.Effect<void, unknown, SqlClient.SqlClient>
  /** Which service serves page `n` (from 1); default the suite's `Keyset`. */
  readonly via?: (page: number) => Effect.Effect<KeysetService, never, R>
}

export const traverse = <R = never>(request: Omit<Keyset.PageRequest, "cursor">, traversal: Traversal<R> = {}) =>
  Effect.gen(function*() {
    const seen: Array<string> = []
    let cursor: string | undefined = undefined
    let pages = 0
    do {
      pages++
      const keyset: KeysetService = yield* (traversal.via?.(pages) ?? Keyset.Keyset)
      const page: Keyset.Page<{ id: unknown }> = yield* keyset.page<{ id: unknown }>(
        cursor === undefined ? request : { ...request, cursor }
      )
      seen.push(...page.items.map((item) => String(item.id)))
      cursor = page.nextCursor
      if (traversal.between !== undefined) yield* traversal.between(pages, seen)
      // A traversal that stops moving fails here rather than at the test's timeout.
      if (pages > 500) return yield* Effect.die(new Error(`no end after ${pages} pages`))
    } while (cursor !== undefined)
    return { seen, pages }
  })

/** How many statements `effect` ran, and its outcome. */
export const countingStatements = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    let statements = 0
    const result = yield* effect.pipe(
      Effect.provideService(Statement.CurrentTransformer, (statement) => {
        statements++
        return Effect.succeed(statement)
      }),
      Effect.result
    )
    return { result, statements }
  })

export const refusal = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(countingStatements(effect), ({ result, statements }) => {
    if (Result.isSuccess(result)) throw new Error("expected a refusal")
    return { error: result.failure, statements }
  })

export const idsOf = (lengths: ReadonlyArray<number>, units: ReadonlyArray<string> = ["k"]) =>
  lengths.map((length, i) => {
    const number = String(i).padStart(3, "0")
    return number + Array.from({ length: Math.max(0, length - 3) }, (_, j) => units[(i + j) % units.length]).join("")
  })

export const createIds = (table: string, type: string, ids: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all([
      sql.unsafe(`DROP TABLE IF EXISTS ${table}`),
      // Three creation times, so that the tie-breaker orders most pages.
      sql.unsafe(`CREATE TABLE ${table} (id ${type} PRIMARY KEY, created_at timestamptz NOT NULL)`),
      sql.unsafe(
        `INSERT INTO ${table} SELECT id, timestamptz '2026-01-01' + (n % 3) * interval '1 hour'
           FROM unnest($1::text[]) WITH ORDINALITY AS x(id, n)`,
        [ids]
      )
    ], { discard: true }))
