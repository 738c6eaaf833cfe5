/**
 * The outbox's operator filter, decoded once and turned into one parameterized SQL predicate:
 * every value is a parameter, every column our own constant. The same predicate serves the
 * message list, the count shown before a bulk action and the bulk action itself, so what an
 * operator confirms is what the action touches.
 */
import * as Input from "@effect-durable/core/Input"
import * as Duration from "effect/Duration"
import * as Schema from "effect/Schema"
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import * as Lifecycle from "../queue/lifecycle.js"
import { MAX_BATCH, MessageId } from "../queue/spec.js"

/** A message's state, as the counts of `OutboxAdmin.stats` define them: the lifecycle's states. */
export const MessageState = Schema.Literals(Lifecycle.OUTBOX_STATE_NAMES)
export type MessageState = typeof MessageState.Type

const JsonMatch = Schema.Struct({
  path: Schema.Array(Input.Text(128)).check(Schema.isMinLength(1), Schema.isMaxLength(16)),
  value: Input.OptionalText(1024)
})

const Age = Input.DurationIn({ min: 0, max: "520 weeks" })

export const FilterSchema = Schema.Struct({
  ids: Schema.optional(Schema.Array(MessageId).check(Schema.isMaxLength(MAX_BATCH))),
  topic: Schema.optional(Input.Text(128)),
  orderingKey: Schema.optional(Input.Text(256)),
  state: Schema.optional(MessageState),
  minAttempts: Schema.optional(Input.Count(1_000_000, 0)),
  olderThan: Schema.optional(Age),
  deadFor: Schema.optional(Age),
  // As shown anywhere: a group key (500 characters) or a raw last error (up to 4,096), any script.
  error: Schema.optional(Input.Text(16_384)),
  payload: Schema.optional(Schema.Array(JsonMatch).check(Schema.isMaxLength(8))),
  headers: Schema.optional(Schema.Array(JsonMatch).check(Schema.isMaxLength(8)))
})
export type DecodedFilter = typeof FilterSchema.Type

// Exact: a filter drives bulk redrive and discard, where a misspelt field would match everything.
export const decodeFilter = Input.argument("filter", FilterSchema, { exact: true })

const lifecycle = Lifecycle.make({ queue: "outbox", done: "projected_at" })

/** SQL for each state; `ready` and `delayed` exclude live leases, as the stats do. */
export const STATE_SQL = Object.fromEntries(
  Lifecycle.STATES.map((state, i) => [Lifecycle.OUTBOX_STATE_NAMES[i]!, lifecycle.is[state]])
) as Readonly<Record<MessageState, string>>

/** The state of the row, as one of `MessageState`. */
export const STATE_OF_ROW = lifecycle.stateOf

/**
 * The error group of a row: its last error with every run of digits as `#` (ids, counts and
 * ports vary from message to message; the failure does not), first 500 characters. One bad
 * deploy is one group.
 */
export const ERROR_GROUP = "regexp_replace(left(coalesce(last_error, ''), 500), '[0-9]+', '#', 'g')"

/** The most characters of a last error its group keeps (`ERROR_GROUP`'s `left`). */
const GROUP_CHARACTERS = 500

/**
 * An error as its group names it, folded as `ERROR_GROUP` folds a row's (first 500
 * characters, every run of ASCII digits as `#`): a group key stays as it is, a raw error or
 * a part of one becomes the key it belongs to.
 */
export const errorGroupOf = (error: string): string =>
  Array.from(error).slice(0, GROUP_CHARACTERS).join("").replace(/[0-9]+/g, "#")

/** A LIKE pattern matching every text that starts with `prefix` (its `%`, `_` and `\\` taken literally). */
const startsWith = (prefix: string): string => `${prefix.replace(/[\\%_]/g, (c) => `\\${c}`)}%`

const seconds = (duration: Duration.Duration) => Duration.toMillis(duration) / 1000

/** The predicate of a decoded filter (`1=1` for an empty one). */
export const predicate = (sql: SqlClient.SqlClient, filter: DecodedFilter): Statement.Fragment => {
  const clauses: Array<Statement.Fragment> = []
  if (filter.ids !== undefined) clauses.push(sql`id = ANY(${filter.ids}::bigint[])`)
  if (filter.topic !== undefined) clauses.push(sql`topic = ${filter.topic}`)
  if (filter.orderingKey !== undefined) clauses.push(sql`ordering_key = ${filter.orderingKey}`)
  if (filter.state !== undefined) clauses.push(sql.literal(`(${STATE_SQL[filter.state]})`))
  if (filter.minAttempts !== undefined) clauses.push(sql`attempt_count >= ${filter.minAttempts}`)
  if (filter.olderThan !== undefined) {
    clauses.push(sql`created_at < now() - make_interval(secs => ${seconds(filter.olderThan)})`)
  }
  if (filter.deadFor !== undefined) {
    clauses.push(sql`dead_at < now() - make_interval(secs => ${seconds(filter.deadFor)})`)
  }
  // The error as shown anywhere — a group key, a raw last error, or the start of either —
  // matches every group that starts with its folded form.
  if (filter.error !== undefined) {
    clauses.push(sql`${sql.literal(ERROR_GROUP)} LIKE ${startsWith(errorGroupOf(filter.error))}`)
  }
  // `#>>` reads the value at the path as text: 42, "42" and the string 42 all match "42".
  for (const match of filter.payload ?? []) clauses.push(sql`payload #>> ${match.path}::text[] = ${match.value}`)
  for (const match of filter.headers ?? []) clauses.push(sql`headers #>> ${match.path}::text[] = ${match.value}`)
  return sql.and(clauses)
}
