// Scenario 2, one message per committed transaction from concurrent producers.
import { formatRate, median, payloads, type QueueContender } from "../common.js"
import { alternate, type Bench, progress } from "../harness.js"

export const PRODUCERS = 16

export interface EnqueueEachResult {
  readonly library: string
  readonly rate: number
  readonly rounds: ReadonlyArray<number>
}

export const run = async (bench: Bench, contenders: ReadonlyArray<QueueContender>, messages: number) => {
  const rows = payloads(messages)
  const rounds = await alternate(bench, contenders, async (contender, round, index) => {
    const database = `bench_enqueue_${index}`
    const url = await bench.freshDatabase(database)
    const started = performance.now()
    await contender.enqueueEach!(url, rows, PRODUCERS)
    const rate = messages / ((performance.now() - started) / 1000)
    await bench.dropDatabase(database)
    progress(round, contender.library, `${formatRate(rate).padStart(7)} msg/s`)
    return rate
  })
  return contenders.map((contender, i): EnqueueEachResult => ({
    library: contender.library,
    rate: median(rounds[i]!),
    rounds: rounds[i]!
  }))
}
