// docs/projector.md "Batch handlers": one call for many messages (a bulk write into a search
// index here), with an outcome per message; drained once, as a job or a test would.
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

interface Product {
  readonly sku: string
  readonly title: string
}

const isProduct = (payload: unknown): payload is Product =>
  typeof payload === "object" && payload !== null && typeof (payload as Product).sku === "string" &&
  typeof (payload as Product).title === "string"

// Up to 100 messages of one topic a call; a short batch waits up to 200 ms to fill once the
// backlog is drained (under a backlog batches are full and nothing waits).
export const IndexProducts = Publisher.layerBatchHandler(
  { maxSize: 100, maxWait: "200 millis" },
  (messages) =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const products = messages.flatMap((message) => isProduct(message.payload) ? [message.payload] : [])
      if (products.length > 0) {
        // One statement for the whole batch. Its failure fails every message of the call (each retried).
        yield* sql`INSERT INTO search_index (sku, title)
                   SELECT * FROM unnest(${products.map((p) => p.sku)}::text[], ${products.map((p) => p.title)}::text[])
                   ON CONFLICT (sku) DO UPDATE SET title = excluded.title`
      }
      // The rest of the batch is delivered; these go to the dead letters (a retryable error would retry them).
      return Publisher.failedIn(
        messages.filter((message) => !isProduct(message.payload)).map((message) =>
          [message, Publisher.permanent("not a product")] as const
        )
      )
    }).pipe(Effect.mapError((error) => Publisher.retryable(`search index: ${error.message}`)))
)

export const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const outbox = yield* Outbox.Outbox
  yield* sql`CREATE TABLE IF NOT EXISTS search_index (sku text PRIMARY KEY, title text NOT NULL)`
  yield* outbox.enqueueMany([
    ...["lamp", "desk", "chair", "shelf"].map((title, i) => ({
      topic: "product-changed",
      payload: { sku: `sku-${i}`, title }
    })),
    { topic: "product-changed", payload: { title: "no sku" } }
  ])
  const counts = yield* Projector.drain({ topics: ["product-changed"] }).pipe(Effect.provide(IndexProducts))
  const [row] = yield* sql<{ indexed: number }>`SELECT count(*)::int AS indexed FROM search_index`
  return { counts, indexed: row?.indexed ?? 0 }
})
