// Scenario 1 (drain throughput, with the drain process's peak RSS and PostgreSQL's CPU per
// message) and the bulk half of scenario 2: each round seeds a fresh database with the
// contender's own bulk API, `BULK_TRANSACTION` messages per transaction, timing it.
import { formatRate, median, payloads, type QueueContender } from "../common.js"
import { alternate, type Bench, drainInChild, progress } from "../harness.js"

export interface DrainResult {
  readonly name: string
  readonly library: string
  readonly settings: Record<string, unknown>
  /** Medians over the rounds. */
  readonly rate: number
  readonly peakRssMB: number
  readonly serverCpuMicrosPerMessage: number
  /** WAL the server wrote during the drain (the whole cluster: nothing else runs), per message. */
  readonly walBytesPerMessage: number
  readonly bulkEnqueueRate: number
  readonly rounds: ReadonlyArray<
    {
      rate: number
      peakRssMB: number
      serverCpuMicrosPerMessage: number
      walBytesPerMessage: number
      bulkEnqueueRate: number
    }
  >
}

export const run = async (bench: Bench, contenders: ReadonlyArray<QueueContender>, messages: number) => {
  const rows = payloads(messages)
  const rounds = await alternate(bench, contenders, async (contender, round, index) => {
    const database = `bench_drain_${index}`
    const url = await bench.freshDatabase(database)
    const seeded = performance.now()
    await contender.enqueueBulk(url, rows)
    const bulkEnqueueRate = messages / ((performance.now() - seeded) / 1000)
    // Same starting point for everyone: statistics and visibility map fresh.
    await bench.execute(url, "VACUUM ANALYZE")
    await bench.execute(url, "CHECKPOINT") // and no checkpoint of the seeding under the drain
    await bench.resetStatements()
    const cpuBefore = await bench.serverCpuSecondsSettled()
    const walBefore = await bench.walPosition()
    const drained = await drainInChild(contender.name, url, messages)
    const serverCpuMicrosPerMessage = ((await bench.serverCpuSecondsSettled()) - cpuBefore) * 1e6 / messages
    const walBytesPerMessage = await bench.walBytesSince(walBefore) / messages
    await bench.reportStatements(contender.name, messages)
    await bench.dropDatabase(database)
    const rate = messages / drained.seconds
    progress(
      round,
      contender.name,
      `${formatRate(rate).padStart(7)} msg/s (${drained.seconds.toFixed(2)} s)  server CPU ${
        serverCpuMicrosPerMessage.toFixed(1)
      } µs/msg  WAL ${walBytesPerMessage.toFixed(0)} B/msg  peak RSS ${drained.peakRssMB} MB  bulk enqueue ${
        formatRate(bulkEnqueueRate)
      } msg/s`
    )
    return { rate, peakRssMB: drained.peakRssMB, serverCpuMicrosPerMessage, walBytesPerMessage, bulkEnqueueRate }
  })
  return contenders.map((contender, i): DrainResult => ({
    name: contender.name,
    library: contender.library,
    settings: contender.settings,
    rate: median(rounds[i]!.map((r) => r.rate)),
    peakRssMB: median(rounds[i]!.map((r) => r.peakRssMB)),
    serverCpuMicrosPerMessage: median(rounds[i]!.map((r) => r.serverCpuMicrosPerMessage)),
    walBytesPerMessage: median(rounds[i]!.map((r) => r.walBytesPerMessage)),
    bulkEnqueueRate: median(rounds[i]!.map((r) => r.bulkEnqueueRate)),
    rounds: rounds[i]!
  }))
}
