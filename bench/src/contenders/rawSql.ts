// The raw-SQL ceiling: the very statements effect-durable's projector sends for a drain —
// the claim (migration 12's function, keyed runs of up to a batch) and the fenced batch mark
// (migration 10's), each with the worker settings in its MATERIALIZED CTE, one round trip
// each, prepared once per connection as Effect's driver does — driven with `pg` in a tight
// loop: what the design costs here without any of the projector's own per-message work.
import pg from "pg"
import type { QueueContender } from "../common.js"

const WORKER = "raw"
const LEASE_SECONDS = 30
const MAX_LEASE_EXPIRIES = 10
const LOCK_TIMEOUT = "5000"

const claim: pg.QueryConfig = {
  name: "raw_claim",
  text: `WITH durable_settings AS MATERIALIZED (SELECT set_config('lock_timeout', $1, true))
    SELECT * FROM "durable"."outbox_claim"(CASE WHEN (SELECT true FROM durable_settings) THEN $2::text END,
      $3::integer, $4::float8, $5::text[], $6::integer, $7::integer)`
}

const complete: pg.QueryConfig = {
  name: "raw_complete",
  text: `WITH durable_settings AS MATERIALIZED (SELECT set_config('lock_timeout', $1, true))
    SELECT id FROM "durable"."outbox_complete_many"(
      CASE WHEN (SELECT true FROM durable_settings) THEN $2::bigint[] END, $3::jsonb) AS id`
}

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
        const { rows } = await client.query<{ id: string; generation: string }>({
          ...claim,
          values: [LOCK_TIMEOUT, WORKER, batch, LEASE_SECONDS, null, MAX_LEASE_EXPIRIES, batch]
        })
        if (rows.length === 0) break
        const fences = JSON.stringify(Object.fromEntries(rows.map((row) => [row.id, [WORKER, Number(row.generation)]])))
        await client.query({ ...complete, values: [LOCK_TIMEOUT, rows.map((row) => row.id), fences] })
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
