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
