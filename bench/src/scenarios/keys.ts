// Keyed delivery: the same messages drained with no ordering key, spread over 1,000 keys and
// 10 keys, and all of one hot key, each library with its own per-key order (effect-durable's
// ordering key; graphile-worker's named queues, which run one job at a time). effect-durable
// also runs with the claim of 0.2 (one message per key per claim), the figure its keyed runs
// are measured against.
import { formatRate, median, payloads, type QueueContender } from "../common.js"
import { alternate, type Bench, drainInChild, progress } from "../harness.js"

export const LAYOUTS = [
  { name: "no key", keyOf: (_i: number): string | null => null },
  { name: "1,000 keys", keyOf: (i: number): string | null => `customer-${i % 1000}` },
  { name: "10 keys", keyOf: (i: number): string | null => `customer-${i % 10}` },
  { name: "one hot key", keyOf: (_i: number): string | null => "customer-hot" }
] as const

/** A drain still running after this is stopped: its rate is then at most messages ÷ this. */
export const DEADLINE_SECONDS = 60

export interface KeysResult {
  readonly name: string
  readonly layout: string
  /** Median drain rate, msg/s (an upper bound when `cut`). */
  readonly rate: number
  /** Some round did not finish within `DEADLINE_SECONDS`. */
  readonly cut: boolean
  readonly rounds: ReadonlyArray<number>
}

export const run = async (bench: Bench, contenders: ReadonlyArray<QueueContender>, messages: number) => {
  const rows = payloads(messages)
  const cases = contenders.flatMap((contender) =>
    contender.enqueueKeyed === undefined ? [] : LAYOUTS.map((layout) => ({ contender, layout }))
  )
  const rounds = await alternate(bench, cases, async ({ contender, layout }, round, index) => {
    const database = `bench_keys_${index}`
    const url = await bench.freshDatabase(database)
    await contender.enqueueKeyed!(url, rows, layout.keyOf)
    await bench.execute(url, "VACUUM ANALYZE")
    const drained = await drainInChild(contender.name, url, messages, DEADLINE_SECONDS * 1000)
    await bench.dropDatabase(database)
    const seconds = drained?.seconds ?? DEADLINE_SECONDS
    const rate = messages / seconds
    progress(
      round,
      `${contender.name} / ${layout.name}`,
      drained === undefined
        ? `< ${formatRate(rate)} msg/s (not drained in ${DEADLINE_SECONDS} s: stopped)`
        : `${formatRate(rate).padStart(7)} msg/s (${seconds.toFixed(2)} s)`
    )
    return { rate, cut: drained === undefined }
  })
  return cases.map(({ contender, layout }, i): KeysResult => ({
    name: contender.name,
    layout: layout.name,
    rate: median(rounds[i]!.map((r) => r.rate)),
    cut: rounds[i]!.some((r) => r.cut),
    rounds: rounds[i]!.map((r) => r.rate)
  }))
}
