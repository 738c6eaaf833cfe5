// The raw-SQL ceiling: the claim and mark-projected statements effect-durable sends (one
// round trip each), driven with `pg` in a tight loop: the physical limit of the design here.
import pg from "pg"
import type { QueueContender } from "../common.js"

const claim = (limit: number) => `
  SELECT set_config('lock_timeout', '5000', true);
  WITH ready AS (
    SELECT c.id FROM durable.outbox c
     WHERE c.projected_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now()
       AND (c.claimed_until IS NULL OR c.claimed_until <= now())
     ORDER BY c.id LIMIT ${limit} FOR UPDATE SKIP LOCKED)
  UPDATE durable.outbox q SET claimed_by = 'raw', claimed_until = now() + interval '30 seconds',
         claim_generation = q.claim_generation + 1, attempt_count = q.attempt_count + 1
   WHERE q.id = ANY(ARRAY(SELECT id FROM ready))
  RETURNING q.id::text AS id, q.claim_generation::text AS generation, q.payload`

const markProjected = (claims: ReadonlyArray<{ id: string; generation: string }>) => `
  SELECT set_config('lock_timeout', '5000', true);
  UPDATE durable.outbox q SET projected_at = now(), claimed_until = NULL
   WHERE q.id = ANY('{${claims.map((c) => c.id).join(",")}}'::bigint[])
     AND '${
  JSON.stringify(Object.fromEntries(claims.map((c) => [c.id, ["raw", Number(c.generation)]])))
}'::jsonb -> q.id::text
         = jsonb_build_array(q.claimed_by, q.claim_generation)
     AND q.claimed_until IS NOT NULL AND q.projected_at IS NULL AND q.dead_at IS NULL`

/** Claims and marks until a claim comes back empty, `batch` at a time on `connections` connections. */
const drain = async (url: string, batch: number, connections: number) => {
  const clients = await Promise.all(Array.from({ length: connections }, async () => {
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    return client
  }))
  try {
    await Promise.all(clients.map(async (client) => {
      while (true) {
        const results = await client.query(claim(batch)) as unknown as Array<pg.QueryResult>
        const rows = results[1]!.rows as Array<{ id: string; generation: string }>
        if (rows.length === 0) break
        await client.query(markProjected(rows))
      }
    }))
  } finally {
    await Promise.all(clients.map((client) => client.end()))
  }
}

/** The ceiling at a batch size and connection count. */
export const make = (batch: number, connections: number): QueueContender => ({
  name: `raw SQL ceiling (batch ${batch}, ${connections} conn)`,
  library: "raw SQL",
  settings: { batch, connections },
  // effect-durable's rows; loaded on use so a drain process holds only `pg`.
  enqueueBulk: (url, messages) => import("./effectDurable.js").then((ed) => ed.enqueueBulk(url, messages)),
  drain: (url) => drain(url, batch, connections)
})

/** At effect-durable's defaults: batches of 500, three in flight (three connections). */
export const atDefaults = make(500, 3)
