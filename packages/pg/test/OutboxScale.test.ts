import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "../src/DurableConfig.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { substrate } from "./support.js"

interface PlanNode {
  readonly "Node Type": string
  readonly "Index Name"?: string
  readonly "Index Cond"?: string
  readonly Plans?: ReadonlyArray<PlanNode>
}

/** Every node of a plan, with its parent. */
const nodes = (node: PlanNode, parent?: PlanNode): ReadonlyArray<{ node: PlanNode; parent?: PlanNode }> => [
  parent === undefined ? { node } : { node, parent },
  ...(node.Plans ?? []).flatMap((child) => nodes(child, node))
]

// Limit -> LockRows -> Index Scan on outbox_open_due_idx: the claim reads the open rows in due
// order (migration 21) and stops after the batch, however many projected rows the table holds. (The plan
// also holds probes by id of the rows the claim picked: the keyed runs' lock and the UPDATE
// itself.)
const scansOfOpenIndex = (plan: unknown) => {
  const root = (plan as ReadonlyArray<{ Plan: PlanNode }>)[0]!.Plan
  const all = nodes(root)
  const parentOf = (node: PlanNode | undefined) => all.find((entry) => entry.node === node)?.parent
  return all
    .filter(({ node }) => node["Index Name"] === "outbox_open_due_idx")
    .map(({ node, parent }) => ({
      byId: /^\(id = (ANY |\w+\.id\))/.test(node["Index Cond"] ?? ""),
      scan: node["Node Type"],
      above: parent?.["Node Type"],
      aboveThat: parentOf(parent)?.["Node Type"]
    }))
}

describe("Outbox at scale", () => {
  it.layer(substrate(), { timeout: "5 minutes" })((it) => {
    it.effect(
      "the claim over 500,000 open rows (and 500,000 delivered in the history) is an index scan on the open-rows index under LockRows and Limit",
      () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const admin = yield* OutboxAdmin.OutboxAdmin
          const worker = yield* OutboxWorker.OutboxWorker
          const table = sql.literal((yield* DurableSettings).table("outbox"))
          // One open row in ten holds a dedup key (the index of migration 15 at 50,000 entries).
          // Due times that do not follow the table's order (waits of none to three minutes,
          // interleaved): the claim's plan must not depend on the statistics (migration 21).
          // The delivered half is in the history, where a delivered message goes.
          const history = sql.literal((yield* DurableSettings).table("outbox_history"))
          yield* sql`INSERT INTO ${table} (topic, payload, dedup_key, due_at)
                   SELECT CASE WHEN i % 10 = 0 THEN 'audit' ELSE 'orders' END, jsonb_build_object('i', i),
                          CASE WHEN i % 20 = 1 THEN 'key-' || i END, now() + make_interval(mins => (i / 2) % 4)
                     FROM generate_series(1, 1000000) i WHERE i % 2 = 1`
          yield* sql`INSERT INTO ${history} (id, topic, payload, projected_at, due_at)
                   SELECT -i, CASE WHEN i % 10 = 0 THEN 'audit' ELSE 'orders' END, jsonb_build_object('i', i),
                          now(), now() + make_interval(mins => i % 4)
                     FROM generate_series(1, 1000000) i WHERE i % 2 = 0`
          yield* sql`ANALYZE ${table}`
          const [{ total, open }] = (yield* sql<{ total: number; open: number }>`
          SELECT count(*)::int AS total, count(*) FILTER (WHERE projected_at IS NULL)::int AS open
            FROM ${sql.literal((yield* DurableSettings).table("outbox_messages"))}`) as [
            { total: number; open: number }
          ]
          expect([total, open]).toEqual([1_000_000, 500_000])
          const expected = { byId: false, scan: "Index Scan", above: "LockRows", aboveThat: "Limit" }
          const checkPlans = Effect.forEach([undefined, ["orders"]], (topics) =>
            Effect.gen(function*() {
              const plan = yield* admin.explainClaim({
                worker: "w",
                limit: 100,
                lease: "30 seconds",
                ...(topics ? { topics } : {})
              })
              const scans = scansOfOpenIndex(plan)
              expect(scans).toContainEqual(expected)
              // Every read of the open index is bounded by a Limit (the claim's), or
              // probes the ids the claim picked (at most its limit).
              expect(scans.every((s) => s.byId || s.above === "Limit" || s.aboveThat === "Limit")).toBe(true)
            }))
          const [{ correlation }] = (yield* sql<{ correlation: number }>`
          SELECT correlation FROM pg_stats WHERE tablename = 'outbox' AND attname = 'due_at'`) as [
            { correlation: number }
          ]
          expect(Math.abs(correlation)).toBeLessThan(0.5)
          yield* checkPlans
          // And it claims: the first 100 open rows in due order (open: odd ids; the earliest due
          // among them, a minute: ids 1, 5, 9, ...).
          const claimed = yield* worker.claim({ worker: "w", limit: 100, lease: "30 seconds" })
          expect(claimed.map((m) => Number(m.id))).toEqual(Array.from({ length: 100 }, (_, i) => 4 * i + 1))

          // A dedup key among 50,000 open ones in a table of 1,000,000: the unique index, never a scan.
          const [dedupPlan] = yield* sql<{ "QUERY PLAN": unknown }>`
          EXPLAIN (FORMAT JSON) SELECT id FROM ${table}
           WHERE topic = 'orders' AND dedup_key = 'key-777761' AND projected_at IS NULL AND dead_at IS NULL FOR UPDATE`
          const dedupNodes = nodes((dedupPlan!["QUERY PLAN"] as ReadonlyArray<{ Plan: PlanNode }>)[0]!.Plan)
          expect(dedupNodes.some(({ node }) => node["Index Name"] === "outbox_dedup_key_idx")).toBe(true)
          expect(dedupNodes.some(({ node }) => node["Node Type"] === "Seq Scan")).toBe(false)
          const outbox = yield* Outbox.Outbox
          const [holder] = yield* sql<
            { id: string }
          >`SELECT id::text AS id FROM ${table} WHERE dedup_key = 'key-777761'`
          expect(yield* outbox.enqueue("orders", { again: true }, { dedupKey: "key-777761" })).toBe(holder!.id)
          const fresh = yield* outbox.enqueue("orders", { fresh: true }, { dedupKey: "key-new" })
          expect(Number(fresh)).toBeGreaterThan(500_000)
        }), // Its own work is a million rows written and indexed (about 25 s on a quiet 2-core
      // machine, far more beside a loaded one): bounded by that work, not by a race.
      300_000
    )
  })
})
