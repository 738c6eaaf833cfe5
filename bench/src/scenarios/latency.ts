// Scenario 3: messages enqueued one per committed transaction at a steady rate, commit →
// handler start.
import { latencies, median, percentile, type QueueContender } from "../common.js"
import { alternate, type Bench, progress } from "../harness.js"

export const RATE = 200

export interface LatencyResult {
  readonly name: string
  readonly p50: number
  readonly p99: number
  readonly max: number
  readonly rounds: ReadonlyArray<{ p50: number; p99: number; max: number }>
}

export const run = async (bench: Bench, contenders: ReadonlyArray<QueueContender>, messages: number) => {
  const rounds = await alternate(bench, contenders, async (contender, round, index) => {
    const database = `bench_latency_${index}`
    const url = await bench.freshDatabase(database)
    const sorted = latencies(await contender.steady!(url, messages, RATE))
    await bench.dropDatabase(database)
    const result = { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), max: sorted[sorted.length - 1]! }
    progress(
      round,
      contender.name,
      `p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(2)} ms  max ${result.max.toFixed(2)} ms`
    )
    return result
  })
  return contenders.map((contender, i): LatencyResult => ({
    name: contender.name,
    p50: median(rounds[i]!.map((r) => r.p50)),
    p99: median(rounds[i]!.map((r) => r.p99)),
    max: median(rounds[i]!.map((r) => r.max)),
    rounds: rounds[i]!
  }))
}
