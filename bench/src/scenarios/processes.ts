// Scenario 5: one outbox drained by 1, 2 and 4 projector processes at once (default
// settings), each process running until no message is open. More processes contend for the
// same rows (SKIP LOCKED) and the same index; the ratio to one process shows whether that
// costs throughput on this machine (on 2 cores, more processes cannot add CPU). Measured in
// steady state: the rate between the 10th and the 90th percentile of the messages' marks
// (`projected_at`, the database clock), so the processes' start-up (Node, modules, pools:
// paid once per process, and four of them on two cores) and the drain's tail are outside
// the timed window. The whole-run rate, start-up included, is kept beside it.
import { formatRate, median, payloads, type QueueContender } from "../common.js"
import { alternate, type Bench, drainInChild, progress } from "../harness.js"

export const PROCESSES = [1, 2, 4] as const

export interface ProcessesResult {
  readonly name: string
  /** Median messages per second in steady state, by number of processes. */
  readonly rates: Record<string, number>
  /** Median messages per second from the processes' spawn to the last mark. */
  readonly wholeRunRates: Record<string, number>
  readonly rounds: ReadonlyArray<Record<string, { readonly steady: number; readonly wholeRun: number }>>
}

export const run = async (bench: Bench, contender: QueueContender, messages: number): Promise<ProcessesResult> => {
  const rows = payloads(messages)
  const rounds = await alternate(bench, PROCESSES, async (processes, round, index) => {
    const database = `bench_processes_${index}`
    const url = await bench.freshDatabase(database)
    await contender.enqueueBulk(url, rows)
    await bench.execute(url, "VACUUM ANALYZE")
    await bench.execute(url, "CHECKPOINT") // the seeding's pages written before the drain, as in the drain scenario
    const started = performance.now()
    // A count of 0: each process drains until the outbox has no open message.
    await Promise.all(Array.from({ length: processes }, () => drainInChild(contender.name, url, 0)))
    const wholeRun = messages / ((performance.now() - started) / 1000)
    const [window] = await bench.execute(
      url,
      `SELECT extract(epoch FROM percentile_disc(0.9) WITHIN GROUP (ORDER BY projected_at)
                 - percentile_disc(0.1) WITHIN GROUP (ORDER BY projected_at))::float8 AS seconds
         FROM durable.outbox_history WHERE projected_at IS NOT NULL`
    )
    const steady = 0.8 * messages / Number(window!.seconds)
    await bench.dropDatabase(database)
    progress(
      round,
      `${contender.name} × ${processes}`,
      `${formatRate(steady).padStart(7)} msg/s steady (${formatRate(wholeRun)} msg/s with start-up)`
    )
    return { steady, wholeRun }
  })
  const ratesOf = (pick: (r: { steady: number; wholeRun: number }) => number) =>
    Object.fromEntries(PROCESSES.map((n, i) => [String(n), median(rounds[i]!.map(pick))]))
  return {
    name: contender.name,
    rates: ratesOf((r) => r.steady),
    wholeRunRates: ratesOf((r) => r.wholeRun),
    rounds: Array.from(
      { length: bench.rounds },
      (_, r) => Object.fromEntries(PROCESSES.map((n, i) => [String(n), rounds[i]![r]!]))
    )
  }
}
