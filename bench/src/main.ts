/**
 * `npm run bench [-- --quick] [-- --drain=N] [-- --only=drain,keys,enqueue,latency,ledger,claim,processes,http,workflows,limits,xmin,batch,feed] [-- --skip=<contender>,...]`: effect-durable
 * against graphile-worker, pg-boss, Effect 4's PersistedQueue (SQL store) and the raw-SQL ceiling,
 * measured in one run on one PostgreSQL, contenders alternating round by round, each
 * measurement on a fresh database. Prints medians, ratios and the targets of issue 6, and
 * writes them as JSON and an SVG chart under bench/results/.
 */
import * as PgServer from "@effect-durable/testing/PgServer"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, totalmem } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { CALL_MILLIS, log } from "./common.js"
import * as Contenders from "./contenders/index.js"
import * as Harness from "./harness.js"
import * as Report from "./report.js"
import * as Batches from "./scenarios/batches.js"
import * as ClaimAtScale from "./scenarios/claimAtScale.js"
import * as Drain from "./scenarios/drain.js"
import * as EnqueueEach from "./scenarios/enqueueEach.js"
import * as FeedScenario from "./scenarios/feed.js"
import * as Http from "./scenarios/http.js"
import * as Keys from "./scenarios/keys.js"
import * as Latency from "./scenarios/latency.js"
import * as Ledger from "./scenarios/ledger.js"
import * as Limits from "./scenarios/limits.js"
import * as Processes from "./scenarios/processes.js"
import * as Workflows from "./scenarios/workflows.js"
import * as XminPinned from "./scenarios/xminPinned.js"

const SCENARIOS = [
  "drain",
  "keys",
  "enqueue",
  "latency",
  "ledger",
  "claim",
  "processes",
  "http",
  "workflows",
  "limits",
  "xmin",
  "batch",
  "feed"
] as const
type Scenario = typeof SCENARIOS[number]

const parseArguments = (args: ReadonlyArray<string>) => {
  let quick = false
  let only: ReadonlyArray<Scenario> = SCENARIOS
  // --skip=<name prefix>,...: leave contenders out of the queue scenarios (the slow ones when only
  // some figures are wanted); every ratio is still between contenders of the same run.
  let skip: ReadonlyArray<string> = []
  // --drain=N: the drain's size (a longer quick drain, e.g. under BENCH_CPU_PROFILE).
  let drain: number | undefined
  for (const arg of args) {
    if (arg === "--quick") quick = true
    else if (arg.startsWith("--drain=")) {
      drain = Number(arg.slice("--drain=".length))
      if (!Number.isSafeInteger(drain) || drain < 1) throw new Error(`--drain: a positive integer, not ${arg}`)
    } else if (arg.startsWith("--skip=")) skip = arg.slice("--skip=".length).split(",").filter((name) => name !== "")
    else if (arg.startsWith("--only=")) {
      const names = arg.slice("--only=".length).split(",")
      const unknown = names.filter((name) => !(SCENARIOS as ReadonlyArray<string>).includes(name))
      if (unknown.length > 0) {
        throw new Error(`--only: unknown scenario ${unknown.join(", ")} (scenarios: ${SCENARIOS.join(", ")})`)
      }
      only = names as Array<Scenario>
    } else {throw new Error(
        `unknown argument ${arg} (usage: npm run bench -- [--quick] [--only=${
          SCENARIOS.join(",")
        }] [--skip=<contender>,...])`
      )}
  }
  return { quick, only, skip, drain }
}

const { drain, only, quick, skip } = parseArguments(process.argv.slice(2))
const kept = <C extends { readonly name: string }>(contenders: ReadonlyArray<C>) =>
  contenders.filter((contender) => !skip.some((prefix) => contender.name.startsWith(prefix)))

/** Sizes: the issue's full run, and a smoke run under two minutes. */
const SIZES = quick
  ? {
    drain: 10_000,
    keys: 2_000,
    enqueueEach: 2_000,
    latency: 300,
    ledger: 2_000,
    claimLarge: 100_000,
    claimHuge: undefined,
    processes: 10_000,
    http: 1_000,
    workflows: 300,
    workflowsTimed: 10,
    limitsFast: 10_000,
    limitsSlow: 2_000,
    xminSeconds: 60,
    batches: 5_000,
    feed: { enqueue: 2_000, bulk: 20_000, read: 20_000, latency: 300 },
    rounds: 1
  }
  : {
    drain: 100_000,
    keys: 10_000,
    enqueueEach: 10_000,
    latency: 2_000,
    ledger: 20_000,
    claimLarge: 1_000_000,
    claimHuge: 10_000_000,
    processes: 100_000,
    http: 5_000,
    workflows: 2_000,
    workflowsTimed: 30,
    limitsFast: 50_000,
    limitsSlow: 5_000,
    xminSeconds: 600,
    batches: 20_000,
    feed: { enqueue: 10_000, bulk: 100_000, read: 100_000, latency: 2_000 },
    rounds: 3
  }
if (drain !== undefined) SIZES.drain = drain

const program = Effect.gen(function*() {
  const server = yield* PgServer.PgServer
  const bench = yield* Effect.acquireRelease(
    Effect.promise(() =>
      Harness.make({ quick, rounds: SIZES.rounds, urlOf: (database) => Redacted.value(server.url(database)) })
    ),
    (bench) => Effect.promise(bench.close)
  )
  const machine = {
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    postgres: bench.version,
    provider: server.provider
  }
  log(`effect-durable bench (${quick ? "quick" : "full"}): ${SIZES.rounds} round(s), contenders alternate`)
  log(
    `machine: ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}, PostgreSQL ${machine.postgres} (${machine.provider})`
  )
  const results: { -readonly [K in keyof Report.Results]: Report.Results[K] } = {}
  const step = <A>(scenario: Scenario, title: string, measure: () => Promise<A>) =>
    only.includes(scenario)
      ? Effect.promise(async () => {
        log(`\n${title}`)
        const started = performance.now()
        const result = await measure()
        log(`  (${((performance.now() - started) / 1000).toFixed(0)} s)`)
        return result
      })
      : Effect.succeed(undefined)

  results.drain = yield* step(
    "drain",
    `drain: ${SIZES.drain.toLocaleString("en")} ready messages (seeded in transactions of 1,000: bulk enqueue)`,
    () => Drain.run(bench, kept(Contenders.all), SIZES.drain)
  )
  results.keys = yield* step(
    "keys",
    `keys: ${SIZES.keys.toLocaleString("en")} ready messages without a key, over 1,000 keys, 10 keys and one hot key`,
    () =>
      Keys.run(
        bench,
        kept([
          Contenders.EffectDurable.defaults,
          Contenders.EffectDurable.onePerKey,
          Contenders.GraphileWorker.fastest,
          Contenders.GraphileWorker.defaults
        ]),
        SIZES.keys
      )
  )
  results.enqueueEach = yield* step(
    "enqueue",
    `enqueue: ${
      SIZES.enqueueEach.toLocaleString("en")
    } messages, one per transaction, ${EnqueueEach.PRODUCERS} producers`,
    () =>
      EnqueueEach.run(
        bench,
        kept([
          Contenders.EffectDurable.defaults,
          Contenders.GraphileWorker.defaults,
          Contenders.PgBoss.tuned,
          Contenders.PersistedQueue.tuned
        ]),
        SIZES.enqueueEach
      )
  )
  results.latency = yield* step(
    "latency",
    `latency: ${SIZES.latency.toLocaleString("en")} messages, one per committed transaction at ${Latency.RATE}/s`,
    () =>
      Latency.run(
        bench,
        kept([
          Contenders.EffectDurable.defaults,
          Contenders.EffectDurable.asyncCommits,
          Contenders.GraphileWorker.defaults,
          Contenders.GraphileWorker.fastest,
          Contenders.PgBoss.tuned
        ]),
        SIZES.latency
      )
  )
  results.ledger = yield* step(
    "ledger",
    `ledger: ${SIZES.ledger.toLocaleString("en")} first observations then replays, concurrency ${Ledger.CONCURRENCY}`,
    () => Ledger.run(bench, SIZES.ledger)
  )
  results.claimAtScale = yield* step(
    "claim",
    `claim at scale: ${ClaimAtScale.CLAIMS} claims of 100 per table, one round`,
    () => ClaimAtScale.run(bench, ClaimAtScale.cases(SIZES.claimLarge, SIZES.claimHuge))
  )
  results.processes = yield* step(
    "processes",
    `processes: ${SIZES.processes.toLocaleString("en")} ready messages drained by ${
      Processes.PROCESSES.join(", ")
    } projector processes at once`,
    () => Processes.run(bench, Contenders.EffectDurable.defaults, SIZES.processes)
  )
  results.http = yield* step(
    "http",
    `http: ${
      SIZES.http.toLocaleString("en")
    } requests, ${Http.CONCURRENCY} at a time, through the Idempotency-Key middleware and without it`,
    () => Http.run(bench, SIZES.http)
  )
  results.workflows = yield* step(
    "workflows",
    `workflows: ${
      SIZES.workflows.toLocaleString("en")
    } starts ${Workflows.CONCURRENCY} at a time, ${SIZES.workflowsTimed} timed runs of 10 steps, ${SIZES.workflowsTimed} clocks of 1 s`,
    () => Workflows.run(bench, SIZES.workflows, SIZES.workflowsTimed)
  )

  results.limits = yield* step(
    "limits",
    `limits: ${SIZES.limitsFast.toLocaleString("en")} no-op deliveries with no limit and a limit that never binds; ${
      SIZES.limitsSlow.toLocaleString("en")
    } deliveries of 10 ms with no limit and a limit of 8; the no-op deliveries again at a rate of 2,000/s; stored-inbox entries with no limit and a consumer limit that never binds`,
    () => Limits.run(bench, { fast: SIZES.limitsFast, slow: SIZES.limitsSlow })
  )

  results.xmin = yield* step(
    "xmin",
    `xmin pinned: ${XminPinned.RATE} messages/s, one per transaction, for ${SIZES.xminSeconds} s, a writing transaction held open through the middle third`,
    () =>
      XminPinned.run(
        bench,
        kept([Contenders.EffectDurable.defaults, Contenders.GraphileWorker.fastest, Contenders.PgBoss.tuned]),
        SIZES.xminSeconds
      )
  )

  results.batches = yield* step(
    "batch",
    `batch handlers: ${
      SIZES.batches.toLocaleString("en")
    } ready messages, a handler whose every call takes ${CALL_MILLIS} ms, one message a call and batches of 100`,
    () => Batches.run(bench, SIZES.batches)
  )

  results.feed = yield* step(
    "feed",
    `feed: ${
      SIZES.feed.enqueue.toLocaleString("en")
    } enqueues one per transaction (${FeedScenario.PRODUCERS} producers) and ${
      SIZES.feed.bulk.toLocaleString("en")
    } in transactions of 1,000, with the feed position and without; ${
      SIZES.feed.read.toLocaleString("en")
    } messages read by ${FeedScenario.CONSUMERS.join(" and ")} consumers; ${
      SIZES.feed.latency.toLocaleString("en")
    } messages committed at ${FeedScenario.RATE}/s to a running consumer`,
    () => FeedScenario.run(bench, SIZES.feed)
  )

  Report.print(results)
  const out = join(dirname(fileURLToPath(import.meta.url)), "..", "results")
  mkdirSync(out, { recursive: true })
  const stem = quick ? "bench-quick" : "bench"
  writeFileSync(
    join(out, `${stem}.json`),
    JSON.stringify(
      {
        date: new Date().toISOString(),
        machine,
        sizes: SIZES,
        results,
        targets: Report.targets(results)
      },
      null,
      2
    ) + "\n"
  )
  if (results.drain !== undefined) {
    writeFileSync(
      join(out, `${stem}.svg`),
      Report.svgChart(
        results.drain,
        `Drain throughput, ${
          SIZES.drain.toLocaleString("en")
        } ready messages (median of ${SIZES.rounds}), ${machine.cores} cores, PostgreSQL ${machine.postgres}`
      )
    )
  }
  log(`\nwrote bench/results/${stem}.json${results.drain === undefined ? "" : ` and ${stem}.svg`}`)
}).pipe(
  Effect.scoped,
  // DATABASE_URL, or an embedded server with durable settings (the test defaults turn fsync
  // off): the bench measures commits that reach the disk.
  Effect.provide(Layer.unwrap(Effect.map(PgServer.ProviderConfig, ({ databaseUrl }) =>
    databaseUrl._tag === "Some"
      ? PgServer.layerUrl(databaseUrl.value)
      : PgServer.layerEmbedded({
        settings: { fsync: "on", synchronous_commit: "on", full_page_writes: "on", ...Harness.statementSettings }
      }))))
)

Effect.runPromise(program).catch((error) => {
  console.error(error)
  process.exitCode = 1
})
