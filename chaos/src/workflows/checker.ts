/**
 * The workflow schedule's checker, order by order:
 * - every start the producer was told committed has its business row, and every business
 *   row its execution (nothing lost); no execution without one (no phantom), none for an
 *   order rolled back on purpose;
 * - every execution complete, with the right result (the approval the producer sent);
 * - each transactional activity applied exactly once per order (one row: its SQL committed
 *   with its journal row);
 * - each ordinary activity at least once; every extra execution explained by a fault
 *   (`duplicates.ts`'s rule: a fault that hit one of the two runners, or the claims, while
 *   the step was between them);
 * - no execution run by two runners at once: two ordinary activity executions of one order by
 *   different runners that overlap in time are explained by a fault the same way (a runner
 *   frozen past its lease wakes up mid-activity; its settle is then fenced out);
 * - no dead run or clock message;
 * - with `--deploy`: an unfinished execution only where B's unguarded rename stopped it (diverged
 *   on `reserveStock` with `reserve` recorded), never an order reserved under both names, and
 *   every patch marker kept (a run on the old branch never audits; one on the patched branch has).
 */
import * as QueueLifecycle from "@effect-durable/pg/QueueLifecycle"
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import { readFileSync } from "node:fs"
import type { Report, RunFacts } from "../checker.js"
import * as Duplicates from "../duplicates.js"
import {
  AUDIT_PATCH,
  ChaosOrder,
  expectedResult,
  type JournalEntry,
  ORDINARY,
  renamedByB,
  TRANSACTIONAL
} from "./schema.js"

const sample = (items: Iterable<string>, n = 5) => {
  const list = [...items]
  return list.length <= n ? list.join(", ") : `${list.slice(0, n).join(", ")}, … (${list.length})`
}
const percent = (part: number, whole: number) => whole === 0 ? "0.0" : ((100 * part) / whole).toFixed(1)

const readJournal = (path: string): Array<JournalEntry> => {
  try {
    return readFileSync(path, "utf8").split("\n").filter((line) => line.length > 0).map((line) => JSON.parse(line))
  } catch {
    return []
  }
}

const explainedText = (explanation: Duplicates.Explanation) =>
  [...explanation.explainedBy].map(([kind, n]) => `${kind} ${n}`).join(", ") || "none needed"

const clockOf = (ms: number | null) => ms === null ? "—" : new Date(ms).toISOString().slice(11, 23)

const explainOrder = (
  admin: SqlClient.SqlClient,
  orderId: string,
  activities: ReadonlyArray<{ name: string; worker: string; at: number; ended: number | null }>
) =>
  Effect.gen(function*() {
    const messages = yield* admin<{
      id: string
      topic: string
      state: string
      attempts: number
      expiries: number
      created: number
      done: number | null
      failures: unknown
    }>`
      SELECT m.id::text AS id, m.topic,
             CASE WHEN m.projected_at IS NOT NULL THEN 'delivered' WHEN m.dead_at IS NOT NULL THEN 'dead'
                  ELSE 'open' END AS state,
             m.attempt_count AS attempts, m.lease_expiries AS expiries,
             extract(epoch FROM m.created_at)::float8 * 1000 AS created,
             extract(epoch FROM m.projected_at)::float8 * 1000 AS done, m.failures
        FROM durable.outbox_messages m
        JOIN durable.workflow_executions e ON e.execution_id = m.payload->>'executionId'
       WHERE e.workflow = ${ChaosOrder._tag} AND e.payload->>'orderId' = ${orderId}
       ORDER BY m.id`
    return [
      `  order ${orderId}: ${
        activities.map((row) => `${row.name} by ${row.worker} ${clockOf(row.at)}–${clockOf(row.ended)}`).join("; ")
      }`,
      ...messages.map((m) =>
        `    message ${m.id} ${m.topic} ${m.state}, created ${clockOf(m.created)}, delivered ${
          clockOf(m.done)
        }, ${m.attempts} claims, ${m.expiries} lapsed leases${
          m.failures === null ? "" : `, failures ${JSON.stringify(m.failures)}`
        }`
      )
    ]
  })

export const check = (admin: SqlClient.SqlClient, facts: RunFacts): Effect.Effect<Report, unknown> =>
  Effect.gen(function*() {
    const orders = yield* admin<{ order_id: string }>`SELECT order_id FROM chaos.wf_orders`
    const rolledBackRows = yield* admin<{ order_id: string }>`SELECT DISTINCT order_id FROM chaos.wf_rolled_back`
    const executions = yield* admin<{
      order_id: string
      status: string
      runs: number
      outcome: string | null
      value: string | null
      diverged: { step: string; unreached: ReadonlyArray<string> } | null
      patched: boolean | null
    }>`
      SELECT e.payload->>'orderId' AS order_id, e.status, e.runs,
             e.result->>'_tag' || '/' || (e.result->'exit'->>'_tag') AS outcome, e.result->'exit'->>'value' AS value,
             CASE WHEN e.status = 'suspended' THEN
               (SELECT w FROM jsonb_array_elements(e.waiting_on) w WHERE w->>'kind' = 'diverged' LIMIT 1) END AS diverged,
             (SELECT (s.result)::text::boolean FROM durable.workflow_steps s
               WHERE s.workflow = e.workflow AND s.execution_id = e.execution_id AND s.kind = 'patch'
                 AND s.name = ${AUDIT_PATCH}) AS patched
        FROM durable.workflow_executions e WHERE e.workflow = ${ChaosOrder._tag}`
    const transactional = yield* admin<{ order_id: string; name: string; n: number }>`
      SELECT order_id, name, count(*)::int AS n FROM chaos.wf_transactional GROUP BY order_id, name`
    const activities = yield* admin<
      { order_id: string; name: string; worker: string; at: number; ended: number | null }
    >`
      SELECT order_id, name, worker, extract(epoch FROM started_at)::float8 * 1000 AS at,
             extract(epoch FROM ended_at)::float8 * 1000 AS ended
        FROM chaos.wf_activities ORDER BY started_at`
    const [dead] = yield* admin<{ n: number }>`
      SELECT count(*)::int AS n FROM durable.outbox_dead
       WHERE topic LIKE 'workflow.%' AND ${admin.literal(QueueLifecycle.outbox.is.dead)}`
    const journal = readJournal(facts.journal)

    const broken: Array<string> = [...facts.incomplete]
    const details: Array<string> = []

    const committed = new Set(orders.map((row) => row.order_id))
    const rolledBack = new Set(rolledBackRows.map((row) => row.order_id))
    const byOrder = new Map(executions.map((row) => [row.order_id, row] as const))
    const ackedMissing = journal.filter((entry) => entry.outcome === "Started" && !committed.has(entry.orderId))
    const rolledBackCommitted = journal.filter((entry) =>
      entry.outcome === "RolledBack" && committed.has(entry.orderId)
    )
    const withoutExecution = [...committed].filter((id) => !byOrder.has(id))
    const phantom = executions.filter((row) => !committed.has(row.order_id)).map((row) => row.order_id)
    const rolledBackStarted = [...rolledBack].filter((id) => byOrder.has(id))
    // B's unguarded rename stops the runs A reserved: diverged on `reserveStock` with `reserve` recorded.
    const divergedByRename = (id: string) => {
      const diverged = byOrder.get(id)?.diverged
      return facts.deployed !== undefined && renamedByB(id) && diverged?.step === "activity reserveStock" &&
        diverged.unreached.includes("activity reserve")
    }
    const unfinished = [...committed].filter((id) =>
      byOrder.has(id) && byOrder.get(id)!.status !== "complete" && !divergedByRename(id)
    )
    const wrong = [...committed].filter((id) => {
      const row = byOrder.get(id)
      return row?.status === "complete" && (row.outcome !== "Complete/Success" || row.value !== expectedResult(id))
    })

    // B's `reserveStock` is the reserve step under its new name: the step is applied once, under one name.
    const txCount = new Map<string, number>()
    for (const row of transactional) {
      const key = `${row.order_id}/${row.name === "reserveStock" ? "reserve" : row.name}`
      txCount.set(key, (txCount.get(key) ?? 0) + row.n)
    }
    const reservedTwice = [
      ...new Set(transactional.filter((row) => row.name === "reserveStock").map((r) => r.order_id))
    ]
      .filter((id) => transactional.some((row) => row.order_id === id && row.name === "reserve"))
    const notOnce = [...committed].flatMap((id) =>
      TRANSACTIONAL.map((name): string => `${id}/${name}`).filter((step) =>
        byOrder.get(id)?.status === "complete" && txCount.get(step) !== 1
      )
    )
    const phantomTx = transactional.filter((row) => !committed.has(row.order_id))

    const runsOf = new Map<string, Array<typeof activities[number]>>()
    for (const row of activities) {
      const key = `${row.order_id}/${row.name}`
      runsOf.set(key, [...(runsOf.get(key) ?? []), row])
    }
    const ordinaryMissing = [...committed].flatMap((id) =>
      ORDINARY.map((name): string => `${id}/${name}`).filter((step) =>
        byOrder.get(id)?.status === "complete" && !runsOf.has(step)
      )
    )
    const duplicates = Duplicates.explain(
      activities.map((row) => ({ message_id: `${row.order_id}/${row.name}`, worker: row.worker, at: row.at })),
      facts.faults,
      facts.leaseMillis
    )
    const extra = activities.length - runsOf.size

    // Two runners at once: activity executions of one order by different workers overlapping
    // in time (an unfinished one — its runner killed — counts until 500 ms, its longest call).
    const perOrder = new Map<string, Array<typeof activities[number]>>()
    for (const row of activities) perOrder.set(row.order_id, [...(perOrder.get(row.order_id) ?? []), row])
    const overlaps: Array<Duplicates.Delivery> = []
    let overlapCount = 0
    for (const [id, rows] of perOrder) {
      for (let i = 0; i < rows.length; i++) {
        for (let j = i + 1; j < rows.length; j++) {
          const a = rows[i]!
          const b = rows[j]!
          if (a.worker !== b.worker && b.at < (a.ended ?? a.at + 500)) {
            const pair = `${id}#${overlapCount++}`
            overlaps.push({ message_id: pair, worker: a.worker, at: a.at }, {
              message_id: pair,
              worker: b.worker,
              at: b.at
            })
          }
        }
      }
    }
    const concurrent = Duplicates.explain(overlaps, facts.faults, facts.leaseMillis)

    // B's patch: a run that took the old branch never audits; one that took the patched branch, once complete, has.
    const audited = new Set(activities.filter((row) => row.name === "audit").map((row) => row.order_id))
    const patchBroken = executions.filter((row) =>
      (row.patched === false && audited.has(row.order_id)) ||
      (row.patched === true && row.status === "complete" && !audited.has(row.order_id))
    ).map((row) => row.order_id)
    if (facts.deployed !== undefined) {
      const took = (branch: boolean) => executions.filter((row) => row.patched === branch).length
      details.push(
        `deploy: ${facts.deployed} runners replaced, code A by B; patch ${AUDIT_PATCH}: ${
          took(true)
        } runs on the patched branch, ${took(false)} on the old; ${
          [...committed].filter(divergedByRename).length
        } diverged on B's unguarded rename (none run under its new name: ${reservedTwice.length} reserved twice); receipts (B's appended step) for ${
          new Set(activities.filter((row) => row.name === "receipt").map((row) => row.order_id)).size
        } orders`
      )
    }
    const runs = executions.map((row) => row.runs)
    details.push(
      `executions: ${executions.length}, runs ${runs.reduce((a, b) => a + b, 0)} (per execution: max ${
        Math.max(0, ...runs)
      }), ${unfinished.length} unfinished`,
      `transactional activities: ${transactional.reduce((a, row) => a + row.n, 0)} rows for ${
        committed.size * TRANSACTIONAL.length
      } steps, ${notOnce.length} not exactly once${notOnce.length === 0 ? "" : ` (${sample(notOnce)})`}`,
      `ordinary activities: ${activities.length} executions of ${runsOf.size} steps, ${extra} repeated (${
        percent(extra, runsOf.size)
      }%), ${duplicates.explained} explained (${explainedText(duplicates)})${
        duplicates.unexplained.length === 0 ?
          "" :
          `, unexplained: ${
            sample(duplicates.unexplained.map((u) => `${u.messageId} by ${u.earlier.worker} then ${u.extra.worker}`))
          }`
      }`,
      `two runners of one execution at once: ${overlapCount}, ${concurrent.explained} explained (${
        explainedText(concurrent)
      })${
        concurrent.unexplained.length === 0
          ? ""
          : `, unexplained: ${sample(concurrent.unexplained.map((u) => u.messageId))}`
      }`,
      `faults: ${facts.faults.filter((f) => !f.skipped).map((f) => f.kind).join(", ") || "none"}`
    )
    // What an unexplained repeat's execution went through: its ordinary activity executions
    // and every run message of it, with the failures each delivery recorded (a run abandoned
    // on a database error, a lease lost before the settle): where to look first.
    const suspects = [
      ...new Set([
        ...duplicates.unexplained.map((u) => u.messageId.split("/")[0]!),
        ...concurrent.unexplained.map((u) => u.messageId.split("#")[0]!)
      ])
    ].slice(0, 3)
    for (const orderId of suspects) {
      details.push(...(yield* explainOrder(admin, orderId, activities.filter((row) => row.order_id === orderId))))
    }
    if (facts.unexpectedExits.length > 0) {
      details.push(`runners restarted after exiting on their own: ${sample(facts.unexpectedExits)}`)
    }

    const lost = new Set([...ackedMissing.map((entry) => entry.orderId), ...withoutExecution])
    if (lost.size > 0) broken.push(`lost ${lost.size} (${sample(lost)})`)
    if (phantom.length + rolledBackStarted.length + phantomTx.length > 0) {
      broken.push(`phantom ${phantom.length + rolledBackStarted.length + phantomTx.length}`)
    }
    if (rolledBackCommitted.length > 0) broken.push(`rolled back yet committed ${rolledBackCommitted.length}`)
    if (unfinished.length > 0) broken.push(`unfinished ${unfinished.length} (${sample(unfinished)})`)
    if (wrong.length > 0) broken.push(`wrong result ${wrong.length} (${sample(wrong)})`)
    if (reservedTwice.length > 0) {
      broken.push(`reserved under both names ${reservedTwice.length} (${sample(reservedTwice)})`)
    }
    if (patchBroken.length > 0) broken.push(`a patch's branch not kept ${patchBroken.length} (${sample(patchBroken)})`)
    if (notOnce.length > 0) broken.push(`transactional activity not exactly once ${notOnce.length}`)
    if (ordinaryMissing.length > 0) broken.push(`ordinary activity never run ${ordinaryMissing.length}`)
    if (duplicates.unexplained.length > 0) broken.push(`unexplained repeats ${duplicates.unexplained.length}`)
    if (concurrent.unexplained.length > 0) {
      broken.push(`two runners at once, unexplained ${concurrent.unexplained.length}`)
    }
    if ((dead?.n ?? 0) > 0) broken.push(`dead run or clock messages ${dead!.n}`)

    return {
      committed: committed.size,
      delivered: executions.filter((row) => row.status === "complete").length,
      lost: lost.size,
      phantom: phantom.length + rolledBackStarted.length + phantomTx.length,
      dead: dead?.n ?? 0,
      duplicates: extra,
      maxRecoverySeconds: 0,
      details,
      broken
    }
  })

export const summary = (report: Report): string =>
  `workflow chaos: started ${report.committed}, complete ${report.delivered}, lost ${report.lost}, phantom ${report.phantom}, dead ${report.dead}, repeated ordinary activities ${report.duplicates} (${
    percent(report.duplicates, report.committed * ORDINARY.length)
  }%)`
