// Scenario 5: one outbox drained by 1, 2 and 4 projector processes at once (default
// settings), each process running until no message is open. More processes contend for the
// same rows (SKIP LOCKED) and the same index; the ratio to one process shows whether that
// costs throughput on this machine (on 2 cores, more processes cannot add CPU).
import { formatRate, median, payloads, type QueueContender } from "../common.js"
import { alternate, type Bench, drainInChild, progress } from "../harness.js"

export const PROCESSES = [1, 2, 4] as const

export interface ProcessesResult {
  readonly name: string
  /** Median messages per second, by number of processes. */
  readonly rates: Record<string, number>
  readonly rounds: ReadonlyArray<Record<string, number>>
}

export const run = async (bench: Bench, contender: QueueContender, messages: number): Promise<ProcessesResult> => {
  const rows = payloads(messages)
  const rounds = await alternate(bench, PROCESSES, async (processes, round, index) => {
    const database = `bench_processes_${index}`
    const url = await bench.freshDatabase(database)
    await contender.enqueueBulk(url, rows)
    await bench.execute(url, "VACUUM ANALYZE")
    const started = performance.now()
    // A count of 0: each process drains until the outbox has no open message.
    await Promise.all(Array.from({ length: processes }, () => drainInChild(contender.name, url, 0)))
    const rate = messages / ((performance.now() - started) / 1000)
    await bench.dropDatabase(database)
    progress(round, `${contender.name} × ${processes}`, `${formatRate(rate).padStart(7)} msg/s`)
    return rate
  })
  const rates = Object.fromEntries(PROCESSES.map((n, i) => [String(n), median(rounds[i]!)]))
  return {
    name: contender.name,
    rates,
    rounds: Array.from(
      { length: bench.rounds },
      (_, r) => Object.fromEntries(PROCESSES.map((n, i) => [String(n), rounds[i]![r]!]))
    )
  }
}
