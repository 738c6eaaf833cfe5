// Flow limits (issue 25): what a global concurrency limit costs and whether it is reached.
// - No-op deliveries, no limit vs a limit of 2,000: above the 1,500 a projector can hold claimed
//   (three batches of 500; a limit of 1,000, used until 2026-12-05, could bind), so the limit
//   never binds, so any difference is what taking capacity in the claim costs (River's
//   #1145: a global limit that halved throughput).
// - 10 ms deliveries, no limit vs a limit of 8: at the limit the ceiling is 8 x 100/s; the
//   rate over that ceiling says how much of the allowed concurrency the claim keeps busy.
// - No-op deliveries with a rate of 2,000 a second (burst 200), well under the drain's own pace:
//   the rate over 2,000 says whether the projector keeps up with the bucket (it sleeps until the
//   next token, not its poll interval) without passing it.
// - No-op deliveries, messages with waits (four levels: none, one, two and three minutes,
//   interleaved): the claim in due order (migration 21) over the drain without waits.
// - The stored inbox: no-op entries drained by three InboxWorker loops (claims of 500, then one
//   completeMany each), with no limit and with a consumer limit of 2,000 that never binds: the
//   same question for the inbox's claim (migration 25).
// effect-durable only: no peer offers a global limit without a paid tier to measure against.
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as InboxWorker from "@effect-durable/pg/InboxWorker"
import * as Effect from "effect/Effect"
import { formatRate, median, payloads } from "../common.js"
import { defaults, enqueueBulk, run as withDurable, slowHandler } from "../contenders/effectDurable.js"
import { alternate, type Bench, drainInChild, progress } from "../harness.js"

const SLOW_LIMIT = 8
const SLOW_MILLIS = 10
const RATE = { limit: 2000, per: "1 second", burst: 200 } as const

const CASES = [
  { name: "no-op, no limit", contender: defaults, limit: undefined, fast: true },
  { name: "no-op, limit 2,000", contender: defaults, limit: 2000, fast: true },
  { name: "10 ms, no limit", contender: slowHandler, limit: undefined, fast: false },
  { name: `10 ms, limit ${SLOW_LIMIT}`, contender: slowHandler, limit: SLOW_LIMIT, fast: false },
  { name: "no-op, rate 2,000/s", contender: defaults, rate: RATE, fast: true },
  { name: "no-op, waits (4 levels)", contender: defaults, waits: true, fast: true },
  { name: "inbox no-op, no limit", contender: defaults, inbox: true, limit: undefined, fast: true },
  { name: "inbox no-op, limit 2,000", contender: defaults, inbox: true, limit: 2000, fast: true }
] as const satisfies ReadonlyArray<{
  readonly name: string
  readonly contender: typeof defaults
  readonly limit?: number | undefined
  readonly rate?: FlowControl.Rate
  readonly waits?: boolean
  /** Stored-inbox entries drained by `InboxWorker` loops instead of outbox messages by a projector. */
  readonly inbox?: boolean
  readonly fast: boolean
}>

const INBOX_WORKERS = 3
const INBOX_BATCH = 500

/**
 * Drains `count` stored-inbox entries of consumer `bench` with `INBOX_WORKERS` loops in this
 * process, each claiming up to `INBOX_BATCH` and completing them in one statement; the seconds
 * it took.
 */
const drainInbox = (url: string, count: number, limit: number | undefined) =>
  withDurable(
    url,
    Effect.gen(function*() {
      if (limit !== undefined) {
        yield* Effect.flatMap(FlowControl.FlowControl, (flow) => flow.setInboxLimit("bench", { maxInFlight: limit }))
      }
      const worker = yield* InboxWorker.InboxWorker
      let done = 0
      const started = performance.now()
      yield* Effect.all(
        Array.from({ length: INBOX_WORKERS }, (_, i) =>
          Effect.gen(function*() {
            while (done < count) {
              const entries = yield* worker.claim({
                consumer: "bench",
                worker: `w${i}`,
                limit: INBOX_BATCH,
                lease: "1 minute"
              })
              if (entries.length === 0) continue
              yield* worker.completeMany(entries.map((entry) => entry.claim))
              done += entries.length
            }
          })),
        { concurrency: "unbounded" }
      )
      return (performance.now() - started) / 1000
    }),
    INBOX_WORKERS + 2
  )

export interface LimitsResult {
  readonly name: string
  readonly limit: number | null
  /** Median drain rate, msg/s. */
  readonly rate: number
  readonly rounds: ReadonlyArray<number>
}

export const run = async (bench: Bench, messages: { readonly fast: number; readonly slow: number }) => {
  const rounds = await alternate(bench, CASES, async (c, round, index) => {
    const count = c.fast ? messages.fast : messages.slow
    const database = `bench_limits_${index}`
    const url = await bench.freshDatabase(database)
    if ("inbox" in c) {
      // Migrated by an empty run, then the entries written in one statement.
      await withDurable(url, Effect.void)
      await bench.execute(
        url,
        `INSERT INTO durable.inbox (consumer, message_id, payload, headers, max_attempts)
         SELECT 'bench', 'm' || g, '{}'::jsonb, '{}'::jsonb, 25 FROM generate_series(1, ${count}) g`
      )
      await bench.execute(url, "VACUUM ANALYZE")
      const seconds = await drainInbox(url, count, c.limit)
      await bench.dropDatabase(database)
      const rate = count / seconds
      progress(round, c.name, `${formatRate(rate).padStart(7)} msg/s (${seconds.toFixed(2)} s)`)
      return rate
    }
    await enqueueBulk(url, payloads(count))
    const limit = "limit" in c ? c.limit : undefined
    const bucket = "rate" in c ? c.rate : undefined
    if (limit !== undefined || bucket !== undefined) {
      await withDurable(
        url,
        Effect.flatMap(
          FlowControl.FlowControl,
          (flow) => flow.setLimit("bench", { maxInFlight: limit ?? null, rate: bucket ?? null })
        )
      )
    }
    if ("waits" in c) {
      await bench.execute(url, "UPDATE durable.outbox SET due_at = due_at + make_interval(mins => (id % 4)::integer)")
    }
    await bench.execute(url, "VACUUM ANALYZE")
    const drained = await drainInChild(c.contender.name, url, count)
    await bench.dropDatabase(database)
    const rate = count / drained.seconds
    progress(round, c.name, `${formatRate(rate).padStart(7)} msg/s (${drained.seconds.toFixed(2)} s)`)
    return rate
  })
  return CASES.map((c, i): LimitsResult => ({
    name: c.name,
    limit: ("limit" in c ? c.limit : undefined) ?? null,
    rate: median(rounds[i]!),
    rounds: rounds[i]!
  }))
}

/** The ratios the report prints: the cost of a limit that never binds, and how full a binding one runs. */
export const summary = (results: ReadonlyArray<LimitsResult>) => {
  const rate = (name: string) => results.find((r) => r.name === name)!.rate
  return {
    unboundLimitOverNone: rate("no-op, limit 2,000") / rate("no-op, no limit"),
    atLimitOverCeiling: rate(`10 ms, limit ${SLOW_LIMIT}`) / (SLOW_LIMIT * (1000 / SLOW_MILLIS)),
    /** Over the bucket's own pace, counting its first burst: at most 1 (slightly above by the burst). */
    rateReached: rate("no-op, rate 2,000/s") / RATE.limit,
    waitsOverNone: rate("no-op, waits (4 levels)") / rate("no-op, no limit"),
    inboxUnboundLimitOverNone: rate("inbox no-op, limit 2,000") / rate("inbox no-op, no limit"),
    slowNoLimit: rate("10 ms, no limit")
  }
}
