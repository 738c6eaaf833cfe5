// Scenario 11: a steady offered load (one message per committed transaction at RATE/s) for a
// while, with a writing transaction held open through its middle third: vacuum can remove no
// row version that died after that transaction began, so every contender's dead tuples pile up.
// Per contender: the dead tuples (its schema's tables, from the statistics, sampled every second)
// at the end of the pinned third per message delivered during it; commit → handler p50/p99 of the
// messages committed in each third (the claim's cost as a worker sees it); the delivery rate in
// each third; and the size of the queue's table (and of its whole schema) after the run.
import pg from "pg"
import { latencies, percentile, type QueueContender, sleep, type Timeline } from "../common.js"
import { alternate, type Bench, progress } from "../harness.js"

export const RATE = 200

/** Where each contender keeps its queue: its schema, and the table its claims scan. */
const QUEUES: ReadonlyArray<readonly [prefix: string, schema: string, table: string]> = [
  ["effect-durable", "durable", "outbox"],
  ["graphile-worker", "graphile_worker", "_private_jobs"],
  ["pg-boss", "pgboss", "job"]
]

export interface Phase {
  /** Commit → handler of the messages committed in this third, ms. */
  readonly p50: number
  readonly p99: number
  /** Messages that reached a handler during this third, per second. */
  readonly rate: number
}

export interface XminResult {
  readonly name: string
  readonly clean: Phase
  readonly pinned: Phase
  readonly after: Phase
  /**
   * The dead row versions the schema's tables gained while the pin held, per message delivered
   * meanwhile (those dead before it may still be pruned or vacuumed; none dead after it can be).
   */
  readonly deadPerMessage: number
  /** The most dead row versions seen at once. */
  readonly deadPeak: number
  /** The tables that held the dead row versions when the pin was released, most first. */
  readonly deadByTable: Readonly<Record<string, number>>
  /** Bytes, right after the last message was delivered: the queue's table (with its indexes and TOAST), the whole schema. */
  readonly queueBytes: number
  readonly schemaBytes: number
}

const queueOf = (name: string) => {
  const found = QUEUES.find(([prefix]) => name.startsWith(prefix))
  if (found === undefined) throw new Error(`xmin scenario: no queue table known for ${name}`)
  return { schema: found[1], table: found[2] }
}

const phase = (timeline: Timeline, from: number, to: number, start: number, end: number): Phase => {
  const sorted = latencies(timeline, from, to)
  let arrived = 0
  for (const at of timeline.received.values()) if (at >= start && at < end) arrived++
  return { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), rate: arrived / ((end - start) / 1000) }
}

/** The first message committed at or after `at` (the phases split the messages by commit time). */
const firstAfter = (committed: ReadonlyArray<number>, at: number) => {
  const i = committed.findIndex((t) => t >= at)
  return i === -1 ? committed.length : i
}

export const run = async (bench: Bench, contenders: ReadonlyArray<QueueContender>, seconds: number) => {
  const count = seconds * RATE
  const third = (seconds * 1000) / 3
  // One round whatever the run's: ten minutes per contender in the full run.
  const rounds = await alternate({ ...bench, rounds: 1 }, contenders, async (contender, round, index) => {
    const database = `bench_xmin_${index}`
    const url = await bench.freshDatabase(database)
    const { schema, table } = queueOf(contender.name)
    const observer = new pg.Client({ connectionString: url })
    await observer.connect()
    const pin = new pg.Client({ connectionString: url })
    await pin.connect()
    // Counted, not estimated: the statistics' n_dead_tup reaches the view only when each backend
    // flushes (up to ten seconds late for an idle one) and differs between contenders' pools.
    await observer.query("CREATE EXTENSION IF NOT EXISTS pgstattuple")
    const deadBy = async (): Promise<Record<string, number>> =>
      Object.fromEntries(
        (await observer.query(
          `SELECT c.relname, (pgstattuple(c.oid)).dead_tuple_count AS n FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`,
          [schema]
        )).rows.map((row) => [row.relname, Number(row.n)])
      )
    const dead = async () => Object.values(await deadBy()).reduce((a, b) => a + b, 0)
    const start = performance.now()
    let pinnedAt = Number.NaN
    let releasedAt = Number.NaN
    let deadAtPin = 0
    let countFrom = Number.NaN
    let countTo = Number.NaN
    let deadAtRelease = 0
    let deadByTable: Record<string, number> = {}
    let deadPeak = 0
    let running = true
    // The pin: a transaction with an xid, open from a third of the run to two thirds. The load
    // starts about half a second after `steady` is called (its listener connects first).
    const pinning = (async () => {
      await sleep(500 + third)
      await pin.query("BEGIN")
      await pin.query("SELECT pg_current_xact_id()")
      pinnedAt = performance.now()
      deadAtPin = await dead()
      // The deliveries counted against the dead versions: those between the two scans.
      countFrom = performance.now()
      await sleep(third)
      countTo = performance.now()
      deadByTable = Object.fromEntries(Object.entries(await deadBy()).filter(([, n]) => n > 0))
      deadAtRelease = Object.values(deadByTable).reduce((a, b) => a + b, 0)
      await pin.query("ROLLBACK")
      releasedAt = performance.now()
    })()
    const sampling = (async () => {
      while (running) {
        deadPeak = Math.max(deadPeak, await dead())
        // A scan holds a snapshot while it reads: every five seconds, not every second.
        await sleep(5000)
      }
    })()
    await bench.resetStatements()
    const timeline = await contender.steady!(url, count, RATE)
    await bench.reportStatements(contender.name, count)
    running = false
    await Promise.all([pinning, sampling])
    const sizes = (await observer.query(
      `SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(format('%I.%I', $1::text, $2::text))),
                       pg_total_relation_size(format('%I.%I', $1::text, $2::text)))::bigint AS queue,
              (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = $1 AND c.relkind IN ('r', 'p'))::bigint AS schema`,
      [schema, table]
    )).rows[0]
    await Promise.all([observer.end(), pin.end()])
    await bench.dropDatabase(database)
    const pinnedFrom = firstAfter(timeline.committed, pinnedAt)
    const pinnedTo = firstAfter(timeline.committed, releasedAt)
    let deliveredWhilePinned = 0
    for (const at of timeline.received.values()) if (at >= countFrom && at < countTo) deliveredWhilePinned++
    // The thirds from the load itself: its first commit, its last arrival.
    const loadStart = timeline.committed[0] ?? start
    let loadEnd = loadStart
    for (const at of timeline.received.values()) loadEnd = Math.max(loadEnd, at)
    const result = {
      clean: phase(timeline, 0, pinnedFrom, loadStart, pinnedAt),
      pinned: phase(timeline, pinnedFrom, pinnedTo, pinnedAt, releasedAt),
      after: phase(timeline, pinnedTo, count, releasedAt, loadEnd),
      deadPerMessage: (deadAtRelease - deadAtPin) / Math.max(1, deliveredWhilePinned),
      deadPeak,
      deadByTable,
      queueBytes: Number(sizes.queue),
      schemaBytes: Number(sizes.schema)
    }
    progress(
      round,
      contender.name,
      `p99 clean ${result.clean.p99.toFixed(2)} / pinned ${result.pinned.p99.toFixed(2)} / after ${
        result.after.p99.toFixed(2)
      } ms  dead/msg ${result.deadPerMessage.toFixed(2)} ${JSON.stringify(deadByTable)}  queue ${
        (result.queueBytes / 2 ** 20).toFixed(1)
      } MB`
    )
    return result
  })
  return contenders.map((contender, i): XminResult => ({ name: contender.name, ...rounds[i]![0]! }))
}
