/**
 * The bound each ordered column pages under: the catalog's (its type, or a validated CHECK
 * constraint), else the one the caller declared (`order.maxLength`) — verified against the rows
 * themselves, since nothing in the schema keeps it. A text column with neither is refused before
 * its first page, naming both ways out.
 */
import type * as Cursor from "@effect-durable/core/Cursor"
import { MAX_BYTES_PER_CHARACTER } from "@effect-durable/core/Cursor"
import { InvalidInput } from "@effect-durable/core/Errors"
import * as Result from "effect/Result"
import type { Column, Layout } from "./catalog.js"
import type { Bounded } from "./positions.js"
import type { Declared, PageRow } from "./statement.js"

export interface Bounds {
  readonly column: Bounded
  readonly tieBreaker: Bounded
  /** The declared bounds in use (for the columns the schema does not bound). */
  readonly declared: Declared
}

type Which = "column" | "tieBreaker"

const boundOf = (
  which: Which,
  column: Column,
  declared: number | undefined
): Result.Result<{ readonly bounded: Bounded; readonly declared: number | undefined }, InvalidInput> => {
  if (column.bytes !== undefined) {
    return Result.succeed({ bounded: { ...column, bytes: column.bytes }, declared: undefined })
  }
  if (declared !== undefined) {
    return Result.succeed({
      bounded: {
        name: column.name,
        shown: `${column.shown} (declared at most ${declared} characters)`,
        bytes: declared * MAX_BYTES_PER_CHARACTER
      },
      declared
    })
  }
  return Result.fail(
    new InvalidInput({
      argument: `order.${which}`,
      rule:
        `a column whose values' length is bounded, so that a cursor carries any row's position whole (${column.name} is ${column.shown}, and neither its type nor a validated CHECK constraint bounds its length): declare the bound with order.maxLength.${which} (verified against the rows), or add CHECK (length(${column.name}) <= n) — ADD CONSTRAINT ... NOT VALID, then VALIDATE CONSTRAINT, which blocks no writes`
    })
  )
}

/** The bounds a traversal pages under, or the refusal of a text column nothing bounds. */
export const effective = (
  layout: Layout,
  maxLength: Declared
): Result.Result<Bounds, InvalidInput> =>
  Result.gen(function*() {
    const column = yield* boundOf("column", layout.column, maxLength.column)
    const tieBreaker = yield* boundOf("tieBreaker", layout.tieBreaker, maxLength.tieBreaker)
    return {
      column: column.bounded,
      tieBreaker: tieBreaker.bounded,
      declared: { column: column.declared, tieBreaker: tieBreaker.declared }
    }
  })

/** Characters as PostgreSQL counts them (code points). */
const characters = (text: string) => {
  let n = 0
  for (const _ of text) n++
  return n
}

const pastBound = (which: Which, layout: Layout, declared: number, length: number) =>
  Result.fail(
    new InvalidInput({
      argument: `order.maxLength.${which}`,
      rule: `a bound every value of ${
        layout[which].name
      } keeps: a row this traversal would serve has ${length} characters there, past the ${declared} declared; nothing of it was served from here`
    })
  )

/**
 * Refuses the page when a row past a declared bound is among those it read, or (on a first
 * page) among every row of the traversal: no row past the bound is served, and no cursor is
 * issued that could not carry a position.
 */
export const verify = (
  layout: Layout,
  declared: Declared,
  rows: ReadonlyArray<PageRow>
): Result.Result<void, InvalidInput> => {
  for (const which of ["column", "tieBreaker"] as const) {
    const bound = declared[which]
    if (bound === undefined) continue
    const overlong = rows[0]?.overlong
    const index = which === "column" ? 0 : 1
    if (overlong !== undefined && overlong[index] > bound) return pastBound(which, layout, bound, overlong[index])
    for (const row of rows) {
      const positions = [row.position, ...(row.highWater === undefined ? [] : [row.highWater])]
      for (const position of positions) {
        const length = characters(which === "column" ? position.value : position.tieBreaker)
        if (length > bound) return pastBound(which, layout, bound, length)
      }
    }
  }
  return Result.void
}

/** The bytes a position part takes in a cursor's payload (JSON, without its quotes). */
const payloadBytes = (text: string) => Buffer.byteLength(JSON.stringify(text), "utf8") - 2

/** Which column's position outgrew its bound (the argument a refusal names). */
export const grown = (bounds: Bounds, position: Cursor.Position): "order.column" | "order.tieBreaker" =>
  payloadBytes(position.tieBreaker) > bounds.tieBreaker.bytes && payloadBytes(position.value) <= bounds.column.bytes
    ? "order.tieBreaker"
    : "order.column"
