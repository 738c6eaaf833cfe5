/**
 * Everything the command prints goes through here: results on stdout (text tables or JSON),
 * progress and logs on stderr, and every line scrubbed of the secrets this process knows
 * (the database password, dashboard credentials), so no output ever carries them. A stored
 * value's control characters are printed as escapes (`\u001b`), so a topic or an error text
 * cannot drive the terminal (set its title, clear it, plant links) nor forge a line.
 */
import { printable, printableJson, printableLines } from "@effect-durable/core/Printable"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as References from "effect/References"

export { printable } from "@effect-durable/core/Printable"

const secrets = new Set<string>()

/** A value that must never be printed (kept only in this process's memory). */
export const registerSecret = (value: string): void => {
  if (value.length < 3) return
  secrets.add(value)
  const encoded = encodeURIComponent(value)
  if (encoded !== value) secrets.add(encoded)
}

/** The password of a PostgreSQL URL, registered as a secret. */
export const registerUrlSecrets = (url: string): void => {
  try {
    const parsed = new URL(url)
    if (parsed.password !== "") registerSecret(decodeURIComponent(parsed.password))
    if (parsed.password !== "") registerSecret(parsed.password)
  } catch {
    // Not a URL: the library refuses it with its own message, which never echoes the value.
  }
}

export const scrub = (text: string): string => {
  let out = text
  for (const secret of secrets) out = out.split(secret).join("***")
  return out
}

/**
 * JSON text of a value. A `bigint` (PostgreSQL's int8, as the driver decodes it) is written as
 * a string, as the library types its ids: `JSON.stringify` alone throws on one.
 */
export const stringify = (value: unknown, indent?: number): string =>
  JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v), indent)

/** Lines of the result, on stdout (a stored value in them: `printable` it, or a newline in it starts a line). */
export const line = (text: string) => Console.log(printableLines(scrub(text)))
/** The screen cleared, then lines of the result: `status --watch` on a terminal. */
export const redraw = (text: string) => Console.log(`\x1b[2J\x1b[H${printableLines(scrub(text))}`)
/** The result as JSON, on stdout (with the controls JSON leaves raw escaped too: the same JSON). */
export const json = (value: unknown, options: { readonly compact?: boolean } = {}) =>
  Console.log(printableJson(scrub(stringify(value, options.compact === true ? undefined : 2))))
/** Progress and notes, on stderr: never mixed into a result a script parses. */
export const note = (text: string) => Console.error(printableLines(scrub(text)))

/** Logs (the library's and ours) on stderr, one line each, scrubbed. */
export const stderrLogger = Logger.make(({ logLevel, message }) => {
  const text = (Array.isArray(message) ? message : [message]).map((
    part
  ) => (typeof part === "string" ? part : stringify(part)))
    .join(" ")
  process.stderr.write(`${printable(scrub(`[${logLevel.toLowerCase()}] ${text}`))}\n`)
})

export interface Column<Row> {
  readonly header: string
  readonly value: (row: Row) => string | number | null
  readonly align?: "left" | "right"
}

/** A plain-text table: a header, aligned columns, numbers right-aligned. */
export const table = <Row>(columns: ReadonlyArray<Column<Row>>, rows: ReadonlyArray<Row>): string => {
  const cells = rows.map((row) => columns.map((column) => cell(column.value(row))))
  const widths = columns.map((column, i) => Math.max(column.header.length, ...cells.map((r) => r[i]!.length)))
  const right = columns.map((column) =>
    column.align === undefined
      ? rows.length > 0 && typeof column.value(rows[0]!) === "number"
      : column.align === "right"
  )
  const format = (values: ReadonlyArray<string>) =>
    values.map((value, i) => (right[i] ? value.padStart(widths[i]!) : value.padEnd(widths[i]!))).join("  ").trimEnd()
  return [format(columns.map((c) => c.header)), ...cells.map(format)].join("\n")
}

const cell = (value: string | number | null): string =>
  value === null ? "-" : typeof value === "number" ? count(value) : printable(value.replace(/[\r\n\t]+/g, " "))

/** 12,345 */
export const count = (n: number): string => (Number.isInteger(n) ? n.toLocaleString("en-US") : n.toFixed(2))

/** An age in seconds as `2h 5m`, `3m 20s`, `4.2s`. */
export const age = (seconds: number | null): string => {
  if (seconds === null) return "-"
  if (seconds < 10) return `${seconds.toFixed(1)}s`
  const s = Math.round(seconds)
  const units: ReadonlyArray<readonly [string, number]> = [["d", 86_400], ["h", 3_600], ["m", 60], ["s", 1]]
  const parts: Array<string> = []
  let rest = s
  for (const [unit, size] of units) {
    if (rest >= size || (unit === "s" && parts.length === 0)) {
      parts.push(`${Math.floor(rest / size)}${unit}`)
      rest %= size
    }
    if (parts.length === 2) break
  }
  return parts.join(" ")
}

/** Truncates a one-line text for a table cell. */
export const clip = (text: string | null, max = 60): string | null =>
  text === null ? null : text.length <= max ? text : `${text.slice(0, max - 1)}…`

/** `n thing(s)` */
export const plural = (n: number, thing: string, things = `${thing}s`) => `${count(n)} ${n === 1 ? thing : things}`

/**
 * Runs `effect` with its logs shown as progress on stderr (`prefix: message`): the purges
 * report each batch at debug level.
 */
export const withProgressLogs = <A, E, R>(prefix: string, effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.provideService(References.MinimumLogLevel, "Debug"),
    // In place of the command's logger (`stderrLogger`, installed for every command by the command tree).
    Effect.provide(Logger.layer([
      Logger.make(({ message }) => {
        const text = (Array.isArray(message) ? message : [message]).map(String).join(" ").replace(
          /^effect-durable: /,
          ""
        )
        process.stderr.write(`${printable(scrub(`${prefix}: ${text}`))}\n`)
      })
    ]))
  )
