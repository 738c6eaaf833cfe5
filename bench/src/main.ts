/**
 * `npm run bench [-- --quick]`: drain throughput of effect-durable (default and tuned)
 * against graphile-worker (its documented fastest settings, and its defaults) and the
 * raw-SQL ceiling (the same claim and mark statements driven directly with `pg`), measured
 * in one run on one PostgreSQL, contenders alternating round by round, each round on a
 * fresh database with the same rows; then commit-to-handler latency at a steady rate.
 * Prints medians and ratios and writes them as JSON and an SVG bar chart under
 * bench/results/. pg-boss and SqlPersistedQueue come next (issue 6).
 */
import * as Durable from "@effect-durable/pg/Durable"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as PgServer from "@effect-durable/testing/PgServer"
import * as Reactivity from "@effect/experimental/Reactivity"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Redacted from "effect/Redacted"
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, totalmem } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"
import * as GraphileWorker from "./graphileWorker.js"

const quick = process.argv.includes("--quick")
const MESSAGES = quick ? 20_000 : 100_000
const ROUNDS = 3
const BATCH = 100
// A 200-byte JSON payload, the same for every contender.
const PAYLOAD = { orderId: 0, customer: "customer-000000", sku: "SKU-0000", note: "x".repeat(132) }

const log = (line: string) => process.stdout.write(`${line}\n`)

interface Contender {
  readonly name: string
  readonly settings: string
  /** Writes MESSAGES ready messages into the fresh database at `url`, with the contender's own bulk API. */
  readonly seed: (url: string) => Promise<void>
  /** Drains every ready message of the database at `url`; returns when none is open. */
  readonly drain: (url: string) => Promise<void>
}

const payloads = () => Array.from({ length: MESSAGES }, (_, i) => ({ ...PAYLOAD, orderId: i }))

/** effect-durable's schema and rows: shared by effect-durable and the raw-SQL ceiling. */
const seedOutbox = (url: string) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const outbox = yield* Outbox.Outbox
      const all = payloads()
      for (let start = 0; start < all.length; start += 10_000) {
        yield* outbox.enqueueMany(all.slice(start, start + 10_000).map((payload) => ({ topic: "bench", payload })))
      }
      const sql = yield* PgClient.PgClient
      yield* sql`VACUUM ANALYZE durable.outbox`
    }).pipe(
      Effect.provide(Durable.layer({ connection: { url: Redacted.make(url) }, migrate: true })),
      Effect.scoped,
      Logger.withMinimumLogLevel(LogLevel.Warning)
    )
  )

const graphile = (settings: GraphileWorker.GraphileSettings): Contender => ({
  name: settings.label,
  settings: JSON.stringify(settings.worker),
  seed: (url) => GraphileWorker.seed(url, payloads()),
  drain: (url) => GraphileWorker.drain(url, settings)
})

const RAW_CLAIM = (limit: number) => `
  SELECT set_config('lock_timeout', '5000', true);
  WITH ready AS (
    SELECT c.id FROM durable.outbox c
     WHERE c.projected_at IS NULL AND c.dead_at IS NULL AND c.available_at <= now()
       AND (c.claimed_until IS NULL OR c.claimed_until <= now())
     ORDER BY c.id LIMIT ${limit} FOR UPDATE SKIP LOCKED)
  UPDATE durable.outbox q SET claimed_by = 'raw', claimed_until = now() + interval '30 seconds',
         claim_generation = q.claim_generation + 1, attempt_count = q.attempt_count + 1
    FROM ready WHERE q.id = ready.id
  RETURNING q.id::text AS id, q.claim_generation::text AS generation, q.payload`

const RAW_MARK = (claims: ReadonlyArray<{ id: string; generation: string }>) => `
  SELECT set_config('lock_timeout', '5000', true);
  UPDATE durable.outbox q SET projected_at = now(), claimed_until = NULL
    FROM unnest('{${claims.map((c) => c.id).join(",")}}'::bigint[], '{${claims.map((c) => c.generation).join(",")}}'::bigint[]) AS c(id, generation)
   WHERE q.id = c.id AND q.claimed_by = 'raw' AND q.claim_generation = c.generation AND q.projected_at IS NULL`

/** The ceiling: claim and mark (one round trip each, as effect-durable sends them) in a tight loop. */
const rawSql = (connections: number): Contender => ({
  name: `raw SQL ceiling (${connections} conn)`,
  settings: `batch ${BATCH}, ${connections} connection(s), no-op handler`,
  seed: seedOutbox,
  drain: async (url) => {
    const clients = await Promise.all(Array.from({ length: connections }, async () => {
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      return client
    }))
    await Promise.all(clients.map(async (client) => {
      while (true) {
        const results = await client.query(RAW_CLAIM(BATCH)) as unknown as Array<pg.QueryResult>
        const rows = results[1]!.rows as Array<{ id: string; generation: string }>
        if (rows.length === 0) break
        await client.query(RAW_MARK(rows))
      }
    }))
    await Promise.all(clients.map((client) => client.end()))
  }
})

/** effect-durable: the projector layer with a no-op publisher, until nothing is open. */
const effectDurable = (name: string, options: Projector.ProjectorOptions, poolSize = 10): Contender => ({
  name,
  settings: JSON.stringify({ batchSize: options.batchSize ?? 100, concurrency: options.concurrency ?? 16, poolSize }),
  seed: seedOutbox,
  drain: (url) =>
    Effect.runPromise(
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        yield* Effect.gen(function*() {
          while ((yield* outbox.unprojectedCount()) > 0) yield* Effect.sleep("5 millis")
        }).pipe(Effect.provide(Projector.layer(options).pipe(Layer.provide(Publisher.layerHandler(() => Effect.void)))))
      }).pipe(
        Effect.provide(Durable.layer({ connection: { url: Redacted.make(url), poolSize } })),
        Effect.scoped
      )
    )
})

const contenders: ReadonlyArray<Contender> = [
  effectDurable("effect-durable (default)", {}),
  effectDurable("effect-durable (tuned)", { batchSize: 500, concurrency: 64 }),
  graphile(GraphileWorker.fastest),
  graphile(GraphileWorker.defaults),
  rawSql(1),
  rawSql(4)
]

/** Latency: messages enqueued one per committed transaction at a steady rate, commit → handler start. */
const LATENCY_MESSAGES = quick ? 500 : 2_000
const LATENCY_RATE = 200

const measureLatency = (url: string, options: Projector.ProjectorOptions) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const outbox = yield* Outbox.Outbox
      const sql = yield* SqlClient.SqlClient
      const committed = new Map<string, number>()
      const received = new Map<string, number>()
      const handler = Publisher.layerHandler((message) =>
        Effect.sync(() => {
          if (!received.has(message.id)) received.set(message.id, performance.now())
        })
      )
      yield* Effect.gen(function*() {
        yield* Effect.sleep("500 millis") // the listener connects
        const start = performance.now()
        for (let i = 0; i < LATENCY_MESSAGES; i++) {
          const id = yield* sql.withTransaction(outbox.enqueue("latency", { ...PAYLOAD, orderId: i }))
          committed.set(id, performance.now())
          const next = start + ((i + 1) * 1000) / LATENCY_RATE
          const wait = next - performance.now()
          if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
        }
        while (received.size < LATENCY_MESSAGES) yield* Effect.sleep("10 millis")
      }).pipe(Effect.provide(Projector.layer(options).pipe(Layer.provide(handler))))
      // A handler can start before `committed` is recorded (the commit's reply is in flight):
      // such a message counts as 0 ms, never negative.
      return [...committed].map(([id, at]) => Math.max(0, received.get(id)! - at)).sort((a, b) => a - b)
    }).pipe(
      Effect.provide(Durable.layer({ connection: { url: Redacted.make(url) }, migrate: true })),
      Effect.scoped,
      Logger.withMinimumLogLevel(LogLevel.Warning)
    )
  )

const percentile = (sorted: ReadonlyArray<number>, p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

const svgChart = (rows: ReadonlyArray<{ name: string; rate: number }>) => {
  const max = Math.max(...rows.map((r) => r.rate))
  const bars = rows.map((row, i) => {
    const width = Math.round((row.rate / max) * 420)
    const y = 30 + i * 34
    return `<text x="10" y="${y + 17}" font-size="13">${row.name}</text>` +
      `<rect x="250" y="${y}" width="${width}" height="24" fill="#4a7fb5"/>` +
      `<text x="${255 + width}" y="${y + 17}" font-size="12">${Math.round(row.rate).toLocaleString("en")} msg/s</text>`
  }).join("\n")
  return `<svg xmlns="http://www.w3.org/2000/svg" width="780" height="${50 + rows.length * 34}" font-family="sans-serif">
<text x="10" y="18" font-size="14" font-weight="bold">Drain throughput, ${MESSAGES.toLocaleString("en")} ready messages (median of ${ROUNDS})</text>
${bars}
</svg>\n`
}

const program = Effect.gen(function*() {
  const server = yield* PgServer.PgServer
  const admin = yield* PgClient.make({ url: server.url() }).pipe(Effect.provide(Reactivity.layer))
  const [version] = yield* admin<{ v: string }>`SELECT current_setting('server_version') AS v`
  log(`effect-durable bench: ${MESSAGES.toLocaleString("en")} messages, ${ROUNDS} rounds, contenders alternate`)
  log(`machine: ${cpus().length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}, PostgreSQL ${version!.v} (${server.provider})`)
  const rates = new Map<string, Array<number>>(contenders.map((c) => [c.name, []]))
  let peakRss = 0
  for (let round = 1; round <= ROUNDS; round++) {
    for (const contender of contenders) {
      const database = `bench_${round}_${contenders.indexOf(contender)}`
      yield* admin.unsafe(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
      yield* admin.unsafe(`CREATE DATABASE ${database} TEMPLATE template0`)
      const url = Redacted.value(server.url(database))
      // Same rows for everyone (MESSAGES ready messages), each through its own bulk API.
      yield* Effect.promise(() => contender.seed(url))
      const sampler = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 50)
      const started = performance.now()
      yield* Effect.promise(() => contender.drain(url))
      const seconds = (performance.now() - started) / 1000
      clearInterval(sampler)
      const rate = MESSAGES / seconds
      rates.get(contender.name)!.push(rate)
      log(`  round ${round}  ${contender.name.padEnd(28)} ${Math.round(rate).toLocaleString("en").padStart(8)} msg/s  (${seconds.toFixed(2)} s)`)
      yield* admin.unsafe(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
    }
  }
  const rows = contenders.map((c) => ({ name: c.name, settings: c.settings, rate: median(rates.get(c.name)!), rounds: rates.get(c.name)! }))
  const ceiling1 = rows.find((r) => r.name === "raw SQL ceiling (1 conn)")!.rate
  log("")
  const graphileFastest = rows.find((r) => r.name === GraphileWorker.fastest.label)!.rate
  log(`| contender | msg/s (median) | ÷ raw SQL ceiling (1 conn) | ÷ graphile-worker (fastest) | settings |`)
  log(`| --- | ---: | ---: | ---: | --- |`)
  for (const row of rows) {
    log(`| ${row.name} | ${Math.round(row.rate).toLocaleString("en")} | ${(row.rate / ceiling1).toFixed(2)} | ${
      (row.rate / graphileFastest).toFixed(2)
    } | ${row.settings} |`)
  }
  log(`\npeak RSS of the bench process: ${Math.round(peakRss / 2 ** 20)} MB`)

  // Latency scenario: effect-durable's defaults and graphile-worker's defaults, alternating.
  log(`\nlatency: ${LATENCY_MESSAGES} messages, one per committed transaction at ${LATENCY_RATE}/s, commit -> handler start`)
  const latencyContenders: ReadonlyArray<readonly [string, (url: string) => Promise<ReadonlyArray<number>>]> = [
    ["effect-durable (default)", (url) => measureLatency(url, {})],
    [GraphileWorker.defaults.label, (url) => GraphileWorker.measureLatency(url, GraphileWorker.defaults, LATENCY_MESSAGES, LATENCY_RATE)]
  ]
  const latencyRounds = new Map<string, Array<{ p50: number; p99: number; max: number }>>(
    latencyContenders.map(([name]) => [name, []])
  )
  for (let round = 1; round <= ROUNDS; round++) {
    for (const [name, measure] of latencyContenders) {
      const database = `bench_latency_${round}_${latencyContenders.findIndex(([n]) => n === name)}`
      yield* admin.unsafe(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
      yield* admin.unsafe(`CREATE DATABASE ${database} TEMPLATE template0`)
      const sorted = yield* Effect.promise(() => measure(Redacted.value(server.url(database))))
      const result = { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), max: sorted[sorted.length - 1]! }
      latencyRounds.get(name)!.push(result)
      log(`  round ${round}  ${name.padEnd(28)} p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(2)} ms  max ${result.max.toFixed(2)} ms`)
      yield* admin.unsafe(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
    }
  }
  const latency = latencyContenders.map(([name]) => {
    const rounds = latencyRounds.get(name)!
    return {
      name,
      p50: median(rounds.map((r) => r.p50)),
      p99: median(rounds.map((r) => r.p99)),
      max: median(rounds.map((r) => r.max)),
      rounds
    }
  })
  log(`\n| contender | p50 (ms) | p99 (ms) | max (ms) |`)
  log(`| --- | ---: | ---: | ---: |`)
  for (const row of latency) log(`| ${row.name} | ${row.p50.toFixed(2)} | ${row.p99.toFixed(2)} | ${row.max.toFixed(2)} |`)
  const out = join(dirname(fileURLToPath(import.meta.url)), "..", "results")
  mkdirSync(out, { recursive: true })
  const stem = quick ? "drain-quick" : "drain"
  writeFileSync(join(out, `${stem}.json`), JSON.stringify({
    date: new Date().toISOString(),
    machine: { cores: cpus().length, memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version, postgres: version!.v },
    messages: MESSAGES,
    rounds: ROUNDS,
    peakRssMB: Math.round(peakRss / 2 ** 20),
    results: rows,
    latency: { messages: LATENCY_MESSAGES, ratePerSecond: LATENCY_RATE, results: latency }
  }, null, 2))
  writeFileSync(join(out, `${stem}.svg`), svgChart(rows))
  log(`wrote bench/results/${stem}.json and ${stem}.svg`)
}).pipe(
  Effect.scoped,
  // DATABASE_URL, or an embedded server with durable settings (the test defaults turn fsync
  // off): the bench measures commits that reach the disk.
  Effect.provide(Layer.unwrapEffect(Effect.map(PgServer.ProviderConfig, ({ databaseUrl }) =>
    databaseUrl._tag === "Some"
      ? PgServer.layerUrl(databaseUrl.value)
      : PgServer.layerEmbedded({ settings: { fsync: "on", synchronous_commit: "on", full_page_writes: "on" } }))))
)

Effect.runPromise(program).catch((error) => {
  console.error(error)
  process.exitCode = 1
})
