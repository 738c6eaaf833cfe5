/**
 * Rows the substrate reads back are decoded with a `Schema` of their shape, outside the
 * projector's hot claim and mark path (there, rows come from our own claim function and are
 * mapped by hand). A row that does not match is a defect: the schema drifted from the code.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

export const decodeRows = <A>(row: Schema.Decoder<A>) => {
  const decode = Schema.decodeUnknownEffect(Schema.Array(row))
  return <E, R>(self: Effect.Effect<ReadonlyArray<unknown>, E, R>): Effect.Effect<ReadonlyArray<A>, E, R> =>
    Effect.flatMap(self, (rows) => Effect.orDie(decode(rows)))
}

/** An outbox message's row as the claim and the feed read it back. */
export interface MessageRow {
  readonly id: string
  readonly topic: string
  readonly ordering_key: string | null
  readonly payload: unknown
  readonly headers: Record<string, string>
  readonly created_at: string
}

/** The message's fields as the API gives them (a claim's, a feed entry's). */
export const messageFields = (row: MessageRow) => ({
  id: row.id,
  topic: row.topic,
  orderingKey: row.ordering_key,
  payload: row.payload,
  headers: row.headers,
  createdAt: row.created_at
})
