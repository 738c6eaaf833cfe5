/**
 * SQL text the substrate writes itself: quoted identifiers (validated first, quoted always),
 * array literals, and statements with their parameters inlined as literals (for `EXPLAIN`
 * of a prepared claim). Quoting is `pg`'s own.
 */
import type * as Statement from "effect/sql/Statement"
import pg from "pg"

/** A double-quoted identifier. Names reach here validated; quoting is defence in depth. */
export const quote = (name: string): string => pg.escapeIdentifier(name)

const arrayElement = (value: unknown): string =>
  value === null || value === undefined ? "NULL" : `"${String(value).replace(/\\/g, "\\\\").replace(/"/g, "\\\"")}"`

/**
 * A list as PostgreSQL array literal text (`{"a",NULL}`), to bind as one untyped parameter and
 * cast in SQL (`${arrayLiteral(xs)}::float8[]`). Effect 4's driver infers an array parameter's
 * element type from its values, and refuses a list of only NULLs or of mixed int and float numbers.
 */
export const arrayLiteral = (values: ReadonlyArray<unknown>): string => `{${values.map(arrayElement).join(",")}}`

/** A parameter value as an SQL literal; values that cannot be one are a defect (callers validate first). */
export const literal = (value: unknown): string => {
  if (value === null || value === undefined) return "NULL"
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error(`cannot inline ${value}`)
    return String(value)
  }
  if (typeof value === "bigint") return value.toString()
  if (typeof value === "boolean") return value ? "true" : "false"
  if (Array.isArray(value)) return literal(arrayLiteral(value))
  if (typeof value === "string") {
    if (value.includes("\u0000")) throw new Error("cannot inline a NUL character")
    return pg.escapeLiteral(value).trim()
  }
  throw new Error(`cannot inline a ${typeof value}`)
}

/** The statement's text with its `$n` placeholders replaced by literals. */
export const inline = (statement: Statement.Statement<unknown>): string => {
  const [text, params] = statement.compile()
  return text.replace(/\$(\d+)/g, (_, n: string) => literal(params[Number(n) - 1]))
}
