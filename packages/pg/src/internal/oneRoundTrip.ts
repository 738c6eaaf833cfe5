/**
 * One round trip for a bounded statement outside any transaction: the timeouts and the
 * statement go to the server as one simple-protocol query, which PostgreSQL runs as one
 * implicit transaction — so `set_config(..., true)` binds the statement that follows, an
 * error rolls everything back and leaves the connection clean. BEGIN, set_config, the
 * statement and COMMIT would be four round trips. The simple protocol takes no parameters,
 * so the statement's parameters are written as SQL literals (`sqlText.inline`); only our own
 * statements, built from validated values, go this way.
 */
import * as SqlClient from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import type * as Statement from "effect/sql/Statement"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { inline } from "./sqlText.js"

/**
 * Texts already inlined, by a key that determines them: a statement issued again and again
 * with the same values (the projector's claim) is compiled once.
 */
export class TextCache {
  private readonly texts = new Map<string, string>()
  constructor(private readonly capacity = 256) {}
  get(key: string, make: () => string): string {
    let text = this.texts.get(key)
    if (text === undefined) {
      if (this.texts.size >= this.capacity) this.texts.clear()
      this.texts.set(key, text = make())
    }
    return text
  }
}

/**
 * Runs `settings` then `statement` in one round trip when no transaction is open, or as
 * the given fallback inside a caller's transaction (where a savepoint is needed). With
 * `cached`, the text is taken from the cache under `key`, which must determine it.
 */
export const boundedStatement = <Row, E, R>(
  sql: SqlClient.SqlClient,
  settings: Statement.Statement<unknown>,
  statement: Statement.Statement<Row>,
  insideTransaction: Effect.Effect<ReadonlyArray<Row>, E, R>,
  cached?: { readonly cache: TextCache; readonly key: string }
): Effect.Effect<ReadonlyArray<Row>, E | SqlError, R> =>
  Effect.flatMap(Effect.serviceOption(SqlClient.TransactionConnection), (transaction): Effect.Effect<ReadonlyArray<Row>, E | SqlError, R> =>
    Option.isSome(transaction)
      ? insideTransaction
      : Effect.flatMap(
        Effect.sync(() => {
          const text = () => `${inline(settings)};\n${inline(statement)}`
          return cached === undefined ? text() : cached.cache.get(cached.key, text)
        }),
        (text) =>
          Effect.map(
            sql.unsafe<never>(text),
            // A multi-statement query answers with one row list per statement.
            (results) => (results as unknown as ReadonlyArray<ReadonlyArray<Row>>).at(-1) ?? []
          )
      ))
