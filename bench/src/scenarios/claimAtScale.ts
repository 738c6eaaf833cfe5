// Scenario 5: latency of one claim of 100 with 10,000 ready rows, with 1,000,000 ready rows,
// and with 10,000 ready rows behind 1,000,000 (and, in the full run, 10,000,000) projected
// rows not yet purged. The table is
// held steady: each claimed batch is marked projected and replaced by 100 new messages
// (neither timed). The projected rows were delivered two days ago (their day of the history
// made for them): after the claims, the purge of everything older than a day is timed
// (retention of that many delivered messages, through `OutboxAdmin.purge`).
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { median, PAYLOAD, percentile } from "../common.js"
import * as EffectDurable from "../contenders/effectDurable.js"
import { alternate, type Bench, progress } from "../harness.js"

// One round of 400 claims per table: no contenders alternate here, and seeding 1,000,000
// rows three times would cost the full run two minutes.
export const CLAIMS = 400
const LIMIT = 100

export interface ClaimCase {
  readonly name: string
  readonly ready: number
  readonly projected: number
}

export interface ClaimResult extends ClaimCase {
  readonly p50: number
  readonly p99: number
  readonly rounds: ReadonlyArray<{ p50: number; p99: number; purge?: Purge | undefined }>
  /** The purge of the projected rows (cases with some): how long, how many it deleted. */
  readonly purge?: Purge | undefined
}

export interface Purge {
  readonly ms: number
  readonly rows: number
}

/** The cases; `huge` adds 10,000 ready behind that many projected rows (a table autovacuum and purge are behind on). */
export const cases = (large: number, huge?: number): ReadonlyArray<ClaimCase> => [
  { name: "10,000 ready", ready: 10_000, projected: 0 },
  { name: `${large.toLocaleString("en")} ready`, ready: large, projected: 0 },
  { name: `10,000 ready + ${large.toLocaleString("en")} projected`, ready: 10_000, projected: large },
  ...(huge === undefined
    ? []
    : [{ name: `10,000 ready + ${huge.toLocaleString("en")} projected`, ready: 10_000, projected: huge }])
]

// The history's day two days ago (UTC), made as `outbox_history_prepare` makes days ahead.
const DELIVERED_DAY = "(now() AT TIME ZONE 'UTC')::date - 2"
const pastDay = `DO $$ DECLARE d date := ${DELIVERED_DAY}; BEGIN
  EXECUTE format('CREATE TABLE durable.%I PARTITION OF durable.outbox_history FOR VALUES FROM (%L) TO (%L)',
    'outbox_history_' || to_char(d, 'YYYYMMDD'), d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
END $$`

// Delivered messages are in the history (the open table holds only open ones), at noon two days ago.
const rows = (count: number, projected: boolean) => `
  INSERT INTO durable.${
  projected ? "outbox_history (id, topic, payload, projected_at)" : "outbox (topic, payload, projected_at)"
}
  SELECT ${projected ? "-g, " : ""}'bench', jsonb_build_object('orderId', g, 'customer', ${
  "'" + PAYLOAD.customer + "'"
}, 'sku', ${"'" + PAYLOAD.sku + "'"}, 'note', repeat('x', ${PAYLOAD.note.length})),
         ${projected ? `(${DELIVERED_DAY})::timestamp AT TIME ZONE 'UTC' + interval '12 hours'` : "NULL"}
    FROM generate_series(1, ${count}) AS g`

export const run = async (bench: Bench, claimCases: ReadonlyArray<ClaimCase>) => {
  const rounds = await alternate({ ...bench, rounds: 1 }, claimCases, async (claimCase, round, index) => {
    const database = `bench_claim_${index}`
    const url = await bench.freshDatabase(database)
    const sorted = await EffectDurable.run(
      url,
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        // Rows written in SQL: this scenario measures the claim, not the enqueue.
        yield* Effect.promise(async () => {
          if (claimCase.projected > 0) {
            await bench.execute(url, pastDay)
            await bench.execute(url, rows(claimCase.projected, true))
          }
          await bench.execute(url, rows(claimCase.ready, false))
          await bench.execute(url, "VACUUM ANALYZE durable.outbox")
          // A day delivered two days ago has been vacuumed and analyzed by autovacuum since.
          if (claimCase.projected > 0) await bench.execute(url, "VACUUM ANALYZE durable.outbox_history")
          // The seeding's dirty pages written out before the claims are timed: a checkpoint of
          // 10,000,000 rows running under them measured the disk, not the claim (2.65× in the
          // run of 2026-12-02, and every scenario after it slowed).
          await bench.execute(url, "CHECKPOINT")
        })
        const took: Array<number> = []
        for (let i = 0; i < CLAIMS; i++) {
          const [duration, claimed] = yield* Effect.timed(
            worker.claim({ worker: "bench", limit: LIMIT, lease: "30 seconds" })
          )
          took.push(Duration.toMillis(duration))
          if (claimed.length !== LIMIT) {
            return yield* Effect.die(new Error(`claimed ${claimed.length}, expected ${LIMIT}`))
          }
          yield* worker.markProjectedMany(claimed.map((message) => message.claim))
          yield* outbox.enqueueMany(
            claimed.map((_, j) => ({ topic: "bench", payload: { ...PAYLOAD, orderId: i * LIMIT + j } }))
          )
        }
        if (claimCase.projected === 0) return { took: took.sort((a, b) => a - b), purge: undefined }
        const admin = yield* OutboxAdmin.OutboxAdmin
        const [duration, purged] = yield* Effect.timed(admin.purge({ olderThan: "1 day" }))
        // Nothing delivered before the cut-off is left (the count a dropped day reports is its statistics').
        const [left] = yield* Effect.promise(() =>
          bench.execute(
            url,
            "SELECT count(*)::int AS n FROM durable.outbox_history WHERE projected_at < now() - interval '1 day'"
          )
        )
        if (left!.n !== 0) return yield* Effect.die(new Error(`${left!.n} delivered messages left after the purge`))
        return { took: took.sort((a, b) => a - b), purge: { ms: Duration.toMillis(duration), rows: purged } }
      })
    )
    await bench.dropDatabase(database)
    const result = { p50: percentile(sorted.took, 0.5), p99: percentile(sorted.took, 0.99), purge: sorted.purge }
    progress(
      round,
      claimCase.name,
      `claim ${LIMIT}: p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(2)} ms${
        result.purge === undefined
          ? ""
          : `  purge of ${result.purge.rows.toLocaleString("en")} delivered: ${result.purge.ms.toFixed(0)} ms`
      }`
    )
    return result
  })
  return claimCases.map((claimCase, i): ClaimResult => ({
    ...claimCase,
    p50: median(rounds[i]!.map((r) => r.p50)),
    p99: median(rounds[i]!.map((r) => r.p99)),
    purge: rounds[i]![0]?.purge,
    rounds: rounds[i]!
  }))
}
