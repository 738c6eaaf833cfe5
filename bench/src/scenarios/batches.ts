// Batch handlers (issue 45): a handler whose cost is per call (5 ms, an API round trip or a
// bulk write), delivering one message a call against batches of up to 100 of one topic
// (`Publisher.layerBatchHandler`), and pg-boss's own batches of 100 (`work`'s `batchSize`,
// sixteen local workers, as the projector's sixteen lanes) as the peer measured beside them.
import { CALL_MILLIS, formatRate, median, payloads, type QueueContender } from "../common.js"
import { EffectDurable, PgBoss } from "../contenders/index.js"
import { alternate, type Bench, drainInChild, progress } from "../harness.js"

const CASES: ReadonlyArray<{ readonly contender: QueueContender; readonly batch: number }> = [
  { contender: EffectDurable.perCallSingle, batch: 1 },
  { contender: EffectDurable.perCallBatch, batch: 100 },
  { contender: PgBoss.batchOf100, batch: 100 }
]

export interface BatchesResult {
  readonly name: string
  /** Messages per call, at most. */
  readonly batch: number
  /** Median drain rate, msg/s. */
  readonly rate: number
  readonly rounds: ReadonlyArray<number>
}

export const run = async (bench: Bench, messages: number) => {
  const rounds = await alternate(bench, CASES, async ({ contender }, round, index) => {
    const database = `bench_batches_${index}`
    const url = await bench.freshDatabase(database)
    await contender.enqueueBulk(url, payloads(messages))
    await bench.execute(url, "VACUUM ANALYZE")
    const drained = await drainInChild(contender.name, url, messages)
    await bench.dropDatabase(database)
    const rate = messages / drained.seconds
    progress(round, contender.name, `${formatRate(rate).padStart(7)} msg/s (${drained.seconds.toFixed(2)} s)`)
    return rate
  })
  return CASES.map(({ batch, contender }, i): BatchesResult => ({
    name: contender.name,
    batch,
    rate: median(rounds[i]!),
    rounds: rounds[i]!
  }))
}

/** What the report prints: batches of 100 over one message a call, and over the peer's batches. */
export const summary = (results: ReadonlyArray<BatchesResult>) => {
  const rate = (name: string) => results.find((r) => r.name === name)!.rate
  return {
    callMillis: CALL_MILLIS,
    batchOverSingle: rate(EffectDurable.perCallBatch.name) / rate(EffectDurable.perCallSingle.name),
    batchOverPgBoss: rate(EffectDurable.perCallBatch.name) / rate(PgBoss.batchOf100.name)
  }
}
