// Tables, the targets (issues 6, 16 and 23) read against this run, one verdict line each, and the SVG chart.
import { formatRate, log, median } from "./common.js"
import { type BatchesResult, summary as batchesSummary } from "./scenarios/batches.js"
import type { ClaimResult } from "./scenarios/claimAtScale.js"
import type { DrainResult } from "./scenarios/drain.js"
import type { EnqueueEachResult } from "./scenarios/enqueueEach.js"
import type { FeedResult } from "./scenarios/feed.js"
import type { HttpResult } from "./scenarios/http.js"
import type { KeysResult } from "./scenarios/keys.js"
import type { LatencyResult } from "./scenarios/latency.js"
import type { LedgerResult } from "./scenarios/ledger.js"
import { type LimitsResult, summary as limitsSummary } from "./scenarios/limits.js"
import type { ProcessesResult } from "./scenarios/processes.js"
import type { WorkflowResult } from "./scenarios/workflows.js"
import type { XminResult } from "./scenarios/xminPinned.js"

export interface Results {
  readonly drain?: ReadonlyArray<DrainResult> | undefined
  readonly keys?: ReadonlyArray<KeysResult> | undefined
  readonly enqueueEach?: ReadonlyArray<EnqueueEachResult> | undefined
  readonly latency?: ReadonlyArray<LatencyResult> | undefined
  readonly ledger?: LedgerResult | undefined
  readonly claimAtScale?: ReadonlyArray<ClaimResult> | undefined
  readonly processes?: ProcessesResult | undefined
  readonly http?: HttpResult | undefined
  readonly workflows?: WorkflowResult | undefined
  readonly limits?: ReadonlyArray<LimitsResult> | undefined
  readonly xmin?: ReadonlyArray<XminResult> | undefined
  readonly batches?: ReadonlyArray<BatchesResult> | undefined
  readonly feed?: FeedResult | undefined
}

export interface Target {
  readonly target: string
  readonly measured: string
  readonly met: boolean
}

const ratio = (value: number) => `${value.toFixed(2)}×`

const find = <A extends { readonly name: string }>(rows: ReadonlyArray<A> | undefined, name: string) =>
  rows?.find((row) => row.name === name)

/** Every target the run measured, with its ratio. */
export const targets = (results: Results): Array<Target> => {
  const out: Array<Target> = []
  const keyed = (name: string, layout: string) =>
    results.keys?.find((row) => row.name === name && row.layout === layout)?.rate
  const hotNow = keyed("effect-durable (default)", "one hot key")
  const hotBefore = keyed("effect-durable (one per key per claim)", "one hot key")
  if (hotNow !== undefined && hotBefore !== undefined) {
    out.push({
      target: "one hot key ≥ 20× the claim of 0.2 (one message per key per claim)",
      measured: ratio(hotNow / hotBefore),
      met: hotNow >= 20 * hotBefore
    })
  }
  if (results.feed !== undefined) {
    out.push({
      target: "the feed position costs an enqueue at most 5 %, one per transaction (issue 47)",
      measured: ratio(results.feed.enqueue.ratio),
      met: results.feed.enqueue.ratio >= 0.95
    })
    out.push({
      target: "the feed position costs an enqueue at most 5 %, in bulk (issue 47)",
      measured: ratio(results.feed.enqueueBulk.ratio),
      met: results.feed.enqueueBulk.ratio >= 0.95
    })
  }
  const drain = results.drain
  const ours = find(drain, "effect-durable (default)")
  if (ours !== undefined) {
    const versus = (name: string, factor: number) => {
      const theirs = find(drain, name)
      if (theirs !== undefined) {
        const r = ours.rate / theirs.rate
        out.push({ target: `drain (default) ≥ ${factor}× ${name}`, measured: ratio(r), met: r >= factor })
      }
    }
    versus("graphile-worker (fastest)", 1.5)
    versus("pg-boss (tuned)", 2)
    versus("PersistedQueue", 10)
    versus("raw SQL ceiling (batch 500, 3 conn)", 0.8)
    const graphileCpu = find(drain, "graphile-worker (fastest)")
    if (graphileCpu !== undefined) {
      const r = ours.serverCpuMicrosPerMessage / graphileCpu.serverCpuMicrosPerMessage
      out.push({
        target: "PostgreSQL CPU per delivered message ≤ 0.75× graphile-worker (fastest)'s",
        measured: `${ratio(r)} (${ours.serverCpuMicrosPerMessage.toFixed(1)} vs ${
          graphileCpu.serverCpuMicrosPerMessage.toFixed(1)
        } µs)`,
        met: r <= 0.75
      })
    }
    const graphileFastest = find(drain, "graphile-worker (fastest)")
    if (graphileFastest !== undefined) {
      out.push({
        target: "WAL bytes per delivered message ≤ graphile-worker (fastest)'s",
        measured: `${ratio(ours.walBytesPerMessage / graphileFastest.walBytesPerMessage)} (${
          ours.walBytesPerMessage.toFixed(0)
        } vs ${graphileFastest.walBytesPerMessage.toFixed(0)} B)`,
        met: ours.walBytesPerMessage <= graphileFastest.walBytesPerMessage
      })
      out.push({
        target: "projector peak RSS ≤ graphile-worker (fastest)'s, same Node",
        measured: `${ours.peakRssMB} vs ${graphileFastest.peakRssMB} MB`,
        met: ours.peakRssMB <= graphileFastest.peakRssMB
      })
    }
    const bulk = (library: string) => drain!.filter((row) => row.library === library).map((row) => row.bulkEnqueueRate)
    const graphileBulk = bulk("graphile-worker")
    if (graphileBulk.length > 0) {
      const r = median(bulk("effect-durable")) / median(graphileBulk)
      out.push({ target: "bulk enqueue ≥ 1.2× graphile-worker addJobs", measured: ratio(r), met: r >= 1.2 })
    }
  }
  const latencyOurs = find(results.latency, "effect-durable (default)")
  const latencyTheirs = find(results.latency, "graphile-worker (defaults)")
  if (latencyOurs !== undefined && latencyTheirs !== undefined) {
    out.push({
      target: "latency p50 ≤ graphile-worker (defaults) p50",
      measured: `${latencyOurs.p50.toFixed(2)} vs ${latencyTheirs.p50.toFixed(2)} ms`,
      met: latencyOurs.p50 <= latencyTheirs.p50
    })
    out.push({
      target: "latency p99 ≤ 1.5× graphile-worker (defaults) p99",
      measured: `${latencyOurs.p99.toFixed(2)} vs ${(1.5 * latencyTheirs.p99).toFixed(2)} ms allowed`,
      met: latencyOurs.p99 <= 1.5 * latencyTheirs.p99
    })
  }
  const ledger = results.ledger
  if (ledger !== undefined) {
    const overhead = ledger.firstRate / ledger.plainRate
    out.push({
      target: "ledger first observations ≥ 0.8× plain transaction",
      measured: ratio(overhead),
      met: overhead >= 0.8
    })
    const replays = ledger.replayRate / ledger.firstRate
    out.push({ target: "ledger replays ≥ 2× first observations", measured: ratio(replays), met: replays >= 2 })
  }
  const claims = results.claimAtScale
  if (claims !== undefined && claims.length >= 2) {
    const base = claims[0]!
    for (const row of claims.slice(1)) {
      const r = row.p50 / base.p50
      out.push({
        target: `claim p50 at ${row.name} ≤ 1.5× at ${base.name}`,
        measured: `${ratio(r)} (p99 ${ratio(row.p99 / base.p99)})`,
        met: r <= 1.5
      })
      if (row.purge !== undefined) {
        out.push({
          target: `retention of ${row.projected.toLocaleString("en")} delivered messages < 1 s`,
          measured: `${(row.purge.ms / 1000).toFixed(2)} s`,
          met: row.purge.ms < 1000
        })
      }
    }
  }
  const processes = results.processes
  if (processes !== undefined) {
    const one = processes.rates["1"]!
    for (const n of ["2", "4"]) {
      const r = processes.rates[n]! / one
      out.push({
        target: `drain with ${n} projector processes ≥ 0.95× one process (steady state)`,
        measured: ratio(r),
        met: r >= 0.95
      })
    }
  }
  const http = results.http
  if (http !== undefined) {
    const first = http.first.rate / http.plain.rate
    out.push({
      target: "HTTP first requests through Idempotency-Key ≥ 0.8× the plain handler",
      measured: ratio(first),
      met: first >= 0.8
    })
    const replays = http.replay.rate / http.first.rate
    out.push({ target: "HTTP exact replays ≥ 2× first requests", measured: ratio(replays), met: replays >= 2 })
  }
  const xminOurs = find(results.xmin, "effect-durable (default)")
  const xminTheirs = find(results.xmin, "graphile-worker (fastest)")
  if (xminOurs !== undefined) {
    out.push({
      target: "xmin pinned: commit → handler p99 in the pinned third ≤ 1.2× the clean third's",
      measured: `${ratio(xminOurs.pinned.p99 / xminOurs.clean.p99)} (${xminOurs.pinned.p99.toFixed(2)} vs ${
        xminOurs.clean.p99.toFixed(2)
      } ms)`,
      met: xminOurs.pinned.p99 <= 1.2 * xminOurs.clean.p99
    })
    out.push({
      target: "xmin pinned: delivery rate in the pinned third ≥ 0.95× the clean third's",
      measured: ratio(xminOurs.pinned.rate / xminOurs.clean.rate),
      met: xminOurs.pinned.rate >= 0.95 * xminOurs.clean.rate
    })
    if (xminTheirs !== undefined) {
      out.push({
        target: "xmin pinned: dead tuples per delivered message ≤ graphile-worker's",
        measured: `${xminOurs.deadPerMessage.toFixed(2)} vs ${xminTheirs.deadPerMessage.toFixed(2)}`,
        met: xminOurs.deadPerMessage <= xminTheirs.deadPerMessage
      })
      out.push({
        target: "xmin pinned: the queue's table after the run ≤ graphile-worker's",
        measured: `${(xminOurs.queueBytes / 2 ** 20).toFixed(1)} vs ${(xminTheirs.queueBytes / 2 ** 20).toFixed(1)} MB`,
        met: xminOurs.queueBytes <= xminTheirs.queueBytes
      })
    }
  }
  return out
}

export const print = (results: Results) => {
  if (results.drain !== undefined) {
    const ceiling = find(results.drain, "raw SQL ceiling (batch 500, 3 conn)")?.rate
    const graphile = find(results.drain, "graphile-worker (fastest)")?.rate
    log("\n### Drain throughput (scenario 1), bulk enqueue (scenario 2), memory (scenario 6)\n")
    log(
      "| contender | drain msg/s | ÷ raw SQL (batch 500, 3 conn) | ÷ graphile-worker (fastest) | server CPU µs/msg | WAL B/msg | peak RSS MB | bulk enqueue msg/s | settings |"
    )
    log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for (const row of results.drain) {
      const of = (base: number | undefined) => (base === undefined ? "–" : (row.rate / base).toFixed(2))
      const bulk = row.library === "raw SQL" ? "–" : formatRate(row.bulkEnqueueRate)
      log(
        `| ${row.name} | ${formatRate(row.rate)} | ${of(ceiling)} | ${of(graphile)} | ${
          row.serverCpuMicrosPerMessage.toFixed(1)
        } | ${row.walBytesPerMessage.toFixed(0)} | ${row.peakRssMB} | ${bulk} | \`${JSON.stringify(row.settings)}\` |`
      )
    }
  }
  if (results.keys !== undefined) {
    const layouts = [...new Set(results.keys.map((row) => row.layout))]
    const names = [...new Set(results.keys.map((row) => row.name))]
    const rowOf = (name: string, layout: string) =>
      results.keys!.find((row) => row.name === name && row.layout === layout)
    const rate = (name: string, layout: string) => rowOf(name, layout)?.rate
    const shown = (name: string, layout: string) => {
      const row = rowOf(name, layout)
      return row === undefined ? "–" : `${row.cut ? "< " : ""}${formatRate(row.rate)}`
    }
    log("\n### Keyed delivery: drain msg/s by ordering-key layout (each library's own per-key order)\n")
    log(`| contender | ${layouts.join(" | ")} | one hot key ÷ no key |`)
    log(`| --- |${layouts.map(() => " ---: |").join("")} ---: |`)
    for (const name of names) {
      const hot = rate(name, "one hot key")
      const free = rate(name, "no key")
      log(
        `| ${name} | ${layouts.map((l) => shown(name, l)).join(" | ")} | ${
          hot === undefined || free === undefined ? "–" : ratio(hot / free)
        } |`
      )
    }
  }
  if (results.enqueueEach !== undefined) {
    log("\n### Enqueue, one message per transaction, 16 producers (scenario 2)\n")
    log("| library | msg/s |")
    log("| --- | ---: |")
    for (const row of results.enqueueEach) log(`| ${row.library} | ${formatRate(row.rate)} |`)
  }
  if (results.latency !== undefined) {
    log("\n### Latency, commit → handler start (scenario 3)\n")
    log("| contender | p50 ms | p99 ms | max ms |")
    log("| --- | ---: | ---: | ---: |")
    for (const row of results.latency) {
      log(`| ${row.name} | ${row.p50.toFixed(2)} | ${row.p99.toFixed(2)} | ${row.max.toFixed(2)} |`)
    }
  }
  if (results.ledger !== undefined) {
    const { firstRate, plainRate, replayRate } = results.ledger
    log("\n### Mutation ledger (scenario 4)\n")
    log("| | per second | ratio |")
    log("| --- | ---: | ---: |")
    log(`| plain transaction (insert + enqueue) | ${formatRate(plainRate)} | 1.00 |`)
    log(`| ledger first observation (same decide) | ${formatRate(firstRate)} | ${(firstRate / plainRate).toFixed(2)} |`)
    log(`| ledger exact replay | ${formatRate(replayRate)} | ${(replayRate / firstRate).toFixed(2)} × first |`)
  }
  if (results.claimAtScale !== undefined) {
    log("\n### Claim of 100 at scale (scenario 5)\n")
    log("| table | p50 ms | p99 ms | purge of the projected, ms |")
    log("| --- | ---: | ---: | ---: |")
    for (const row of results.claimAtScale) {
      log(`| ${row.name} | ${row.p50.toFixed(2)} | ${row.p99.toFixed(2)} | ${row.purge?.ms.toFixed(0) ?? "–"} |`)
    }
  }
  if (results.xmin !== undefined) {
    log("\n### A writing transaction held open through the middle third (scenario 11)\n")
    log(
      "| contender | p50 / p99 ms, clean | pinned | after | msg/s clean / pinned / after | dead per msg | dead peak | queue table MB | schema MB |"
    )
    log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    const mb = (bytes: number) => (bytes / 2 ** 20).toFixed(1)
    const ms = (phase: XminResult["clean"]) => `${phase.p50.toFixed(2)} / ${phase.p99.toFixed(2)}`
    for (const row of results.xmin) {
      log(
        `| ${row.name} | ${ms(row.clean)} | ${ms(row.pinned)} | ${ms(row.after)} | ${row.clean.rate.toFixed(0)} / ${
          row.pinned.rate.toFixed(0)
        } / ${row.after.rate.toFixed(0)} | ${row.deadPerMessage.toFixed(2)} | ${row.deadPeak.toLocaleString("en")} | ${
          mb(row.queueBytes)
        } | ${mb(row.schemaBytes)} |`
      )
    }
  }
  if (results.processes !== undefined) {
    log("\n### One outbox, several projector processes (scenario 7)\n")
    log("| processes | drain msg/s, steady state | ÷ one process | with start-up | ÷ one process |")
    log("| ---: | ---: | ---: | ---: | ---: |")
    const one = results.processes.rates["1"]!
    const oneWhole = results.processes.wholeRunRates["1"]!
    for (const [n, rate] of Object.entries(results.processes.rates)) {
      const whole = results.processes.wholeRunRates[n]!
      log(
        `| ${n} | ${formatRate(rate)} | ${(rate / one).toFixed(2)} | ${formatRate(whole)} | ${
          (whole / oneWhole).toFixed(2)
        } |`
      )
    }
  }
  if (results.http !== undefined) {
    const { first, plain, replay } = results.http
    log("\n### HTTP, Idempotency-Key middleware vs the same handler without it (scenario 8)\n")
    log("| | req/s | ratio | p50 ms | p99 ms |")
    log("| --- | ---: | ---: | ---: | ---: |")
    log(
      `| plain handler (its own transaction) | ${formatRate(plain.rate)} | 1.00 | ${plain.p50.toFixed(2)} | ${
        plain.p99.toFixed(2)
      } |`
    )
    log(
      `| first requests (new key each) | ${formatRate(first.rate)} | ${(first.rate / plain.rate).toFixed(2)} | ${
        first.p50.toFixed(2)
      } | ${first.p99.toFixed(2)} |`
    )
    log(
      `| exact replays | ${formatRate(replay.rate)} | ${(replay.rate / first.rate).toFixed(2)} × first | ${
        replay.p50.toFixed(2)
      } | ${replay.p99.toFixed(2)} |`
    )
  }
  if (results.workflows !== undefined) {
    const engines = Object.entries(results.workflows.engines)
    const cluster = results.workflows.engines["ClusterWorkflowEngine (SingleRunner)"]
    log("\n### Durable workflows, PgWorkflowEngine vs the cluster engine on the same PostgreSQL (scenario 9)\n")
    log("| engine | starts/s | ÷ cluster | completed/s | ÷ cluster | activity step ms | clock late ms (p50 / p95) |")
    log("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (const [name, row] of engines) {
      const of = (value: number, base: number | undefined) => base === undefined ? "–" : (value / base).toFixed(2)
      log(
        `| ${name} | ${formatRate(row.startRate)} | ${of(row.startRate, cluster?.startRate)} | ${
          formatRate(row.completeRate)
        } | ${of(row.completeRate, cluster?.completeRate)} | ${row.stepMillis.toFixed(2)} | ${
          row.wakeMillis.toFixed(0)
        } / ${row.wakeP95Millis.toFixed(0)} |`
      )
    }
  }
  if (results.batches !== undefined) {
    const ratios = batchesSummary(results.batches)
    log(`\n### Batch handlers: a handler whose every call takes ${ratios.callMillis} ms\n`)
    log("| contender | messages a call | msg/s |")
    log("| --- | ---: | ---: |")
    for (const row of results.batches) log(`| ${row.name} | ≤ ${row.batch} | ${formatRate(row.rate)} |`)
    log(
      `\nBatches of 100 over one message a call: ${ratio(ratios.batchOverSingle)}; over pg-boss's batches of 100: ${
        ratio(ratios.batchOverPgBoss)
      }.`
    )
  }
  if (results.feed !== undefined) {
    const feed = results.feed
    log("\n### Feed: the outbox's messages in commit order\n")
    log("| measure | figure |")
    log("| --- | ---: |")
    log(`| enqueue, one per transaction, with the feed position | ${formatRate(feed.enqueue.with)} msg/s |`)
    log(`| the same without it | ${formatRate(feed.enqueue.without)} msg/s |`)
    log(`| enqueue in transactions of 1,000, with the feed position | ${formatRate(feed.enqueueBulk.with)} msg/s |`)
    log(`| the same without it | ${formatRate(feed.enqueueBulk.without)} msg/s |`)
    for (const row of feed.read) {
      const what = row.waiting ? "messages still waiting for delivery" : "delivered messages"
      const who = `${row.consumers} consumer${row.consumers === 1 ? "" : "s"}`
      log(`| ${what} read by ${who} at once, each | ${formatRate(row.each)} msg/s |`)
      if (row.consumers > 1) log(`| ${what} read by ${who} at once, all together | ${formatRate(row.total)} msg/s |`)
    }
    log(`| commit → read, p50 / p99 | ${feed.latency.p50.toFixed(2)} / ${feed.latency.p99.toFixed(2)} ms |`)
    log(
      `\nWith the feed position, an enqueue runs at ${
        ratio(feed.enqueue.ratio)
      } the rate without it one per transaction, ${ratio(feed.enqueueBulk.ratio)} in bulk.`
    )
  }
  if (results.limits !== undefined) {
    const ratios = limitsSummary(results.limits)
    log("\n### Flow limits, taken in the claim (scenario 10)\n")
    log("| case | msg/s |")
    log("| --- | ---: |")
    for (const row of results.limits) log(`| ${row.name} | ${formatRate(row.rate)} |`)
    log(
      `\nA limit that never binds: ${ratios.unboundLimitOverNone.toFixed(2)} × the rate without one. ` +
        `A limit of 8 with 10 ms deliveries: ${
          (ratios.atLimitOverCeiling * 100).toFixed(0)
        } % of its ceiling (800 msg/s). A rate of 2,000/s (burst 200): ${
          (ratios.rateReached * 100).toFixed(0)
        } % of it reached. Messages with waits (four levels): ${
          ratios.waitsOverNone.toFixed(2)
        } × the rate without. The stored inbox, a consumer limit that never binds: ${
          ratios.inboxUnboundLimitOverNone.toFixed(2)
        } × the rate without one.`
    )
  }
  const measured = targets(results)
  if (measured.length > 0) {
    log("\n### Targets (issues 6, 16 and 23)\n")
    log("| target | measured | met |")
    log("| --- | --- | --- |")
    for (const t of measured) log(`| ${t.target} | ${t.measured} | ${t.met ? "yes" : "**no**"} |`)
    log("\nVerdicts:")
    for (const t of measured) log(`  ${t.met ? "MET    " : "NOT MET"}  ${t.target}: ${t.measured}`)
  }
}

/** Drain throughput as horizontal bars. */
export const svgChart = (rows: ReadonlyArray<DrainResult>, title: string) => {
  const max = Math.max(...rows.map((r) => r.rate))
  const bars = rows.map((row, i) => {
    const width = Math.round((row.rate / max) * 420)
    const y = 30 + i * 34
    const fill = row.library === "effect-durable" ? "#2f855a" : row.library === "raw SQL" ? "#a0aec0" : "#4a7fb5"
    return `<text x="10" y="${y + 17}" font-size="13">${row.name}</text>` +
      `<rect x="250" y="${y}" width="${width}" height="24" fill="${fill}"/>` +
      `<text x="${255 + width}" y="${y + 17}" font-size="12">${formatRate(row.rate)} msg/s</text>`
  }).join("\n")
  return `<svg xmlns="http://www.w3.org/2000/svg" width="780" height="${
    50 + rows.length * 34
  }" font-family="sans-serif">
<text x="10" y="18" font-size="14" font-weight="bold">${title}</text>
${bars}
</svg>\n`
}
