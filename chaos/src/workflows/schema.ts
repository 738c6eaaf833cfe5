/**
 * The workflow schedule's workflow, tables and names (`npm run chaos -- --workflows`),
 * shared by its producer, its runner processes and its checker.
 *
 * An order: `reserve` (transactional: its row commits with its journal row), `charge` (an
 * ordinary activity: at least once, each execution recorded on its own), the producer's
 * approval (a deferred completed from the producer's process), a durable clock, `ship`
 * (ordinary), `confirm` (transactional). The tables have no unique key: a transactional
 * activity applied twice would show as a second row.
 */
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as WorkflowLimits from "@effect-durable/workflow/WorkflowLimits"
import * as WorkflowPatch from "@effect-durable/workflow/WorkflowPatch"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as Activity from "effect/workflow/Activity"
import * as DurableClock from "effect/workflow/DurableClock"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import { FLOW_GROUPS } from "../options.js"

/** An order's customer: its number modulo `FLOW_GROUPS` (the group its runs are limited by, `--limits`). */
export const customerOf = (orderId: string) => `customer-${Number(orderId.replace(/\D/g, "")) % FLOW_GROUPS}`

export const ChaosOrder = WorkflowLimits.groupBy(
  Workflow.make("ChaosOrder", {
    payload: { orderId: Schema.String },
    success: Schema.String,
    idempotencyKey: ({ orderId }) => orderId
  }),
  ({ orderId }) => customerOf(orderId)
)

/** Completed by the producer, 0.2-2 s after the order's start committed. */
export const Approved = DurableDeferred.make("ChaosOrder/Approved", { success: Schema.String })

export const approvalOf = (orderId: string) => `approved-${orderId}`
/** What every execution must end with. */
export const expectedResult = (orderId: string) => `${orderId}:${approvalOf(orderId)}:shipped`

export const TRANSACTIONAL = ["reserve", "confirm"] as const
export const ORDINARY = ["charge", "ship"] as const

export const DDL = [
  `CREATE SCHEMA chaos`,
  // The business row the start commits with (the producer's retry after a cut COMMIT may
  // find it there).
  `CREATE TABLE chaos.wf_orders (
     order_id text PRIMARY KEY,
     created_at timestamptz NOT NULL DEFAULT clock_timestamp())`,
  // Rolled back on purpose after the start, recorded in a transaction of their own: these
  // orders must have no execution.
  `CREATE TABLE chaos.wf_rolled_back (order_id text NOT NULL)`,
  // Every execution of an ordinary activity, committed on its own when it starts; ended_at
  // when it finishes (a killed one never does).
  `CREATE TABLE chaos.wf_activities (
     id bigserial PRIMARY KEY,
     order_id text NOT NULL,
     name text NOT NULL,
     worker text NOT NULL,
     started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
     ended_at timestamptz)`,
  // What the transactional activities wrote, in their transaction: exactly one row per
  // (order, activity).
  `CREATE TABLE chaos.wf_transactional (
     order_id text NOT NULL,
     name text NOT NULL,
     worker text NOT NULL,
     at timestamptz NOT NULL DEFAULT clock_timestamp())`
] as const

/** A statement an ordinary activity retries through an outage (a restart lasts up to 4 s). */
const OUTAGE = Schedule.max([Schedule.spaced("250 millis"), Schedule.recurs(120)])

const ordinary = (orderId: string, name: string, worker: string) =>
  Activity.make({
    name,
    execute: Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const [row] = yield* sql<{ id: string }>`
        INSERT INTO chaos.wf_activities (order_id, name, worker) VALUES (${orderId}, ${name}, ${worker})
        RETURNING id::text AS id`.pipe(Effect.retry(OUTAGE))
      // A call to another service: long enough for a fault to land mid-activity.
      yield* Effect.sleep(Duration.millis(50 + Math.random() * 400))
      yield* sql`UPDATE chaos.wf_activities SET ended_at = clock_timestamp() WHERE id = ${row!.id}::bigint`.pipe(
        Effect.retry(OUTAGE)
      )
    }).pipe(Effect.orDie)
  })

const transactional = (orderId: string, name: string, worker: string) =>
  Activity.make({
    name,
    execute: Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql`INSERT INTO chaos.wf_transactional (order_id, name, worker) VALUES (${orderId}, ${name}, ${worker})`
    ).pipe(Effect.orDie, Effect.asVoid)
  }).pipe(PgWorkflowEngine.transactional)

/** The workflow's code versions of a rolling deploy (`--deploy`); A is the schedule's own. */
export type CodeVersion = "A" | "B"

/**
 * Version B's unguarded change applies to these orders: it renames their `reserve` to
 * `reserveStock`. A run of theirs that recorded `reserve` under A and replays under B diverges.
 */
export const renamedByB = (orderId: string) => Number(orderId.replace(/\D/g, "")) % 5 === 0
/** Version B's change guarded by a patch: an `audit` before the charge. */
export const AUDIT_PATCH = "audit-before-charge"

/**
 * The workflow's body, recording `worker` with what it does. Version B changes three things: an
 * `audit` before the charge (incompatible, guarded by a patch: runs A took past it keep the old
 * branch), a `receipt` after the confirmation (compatible: appended), and `reserve` renamed for
 * the `renamedByB` orders (incompatible, unguarded: their runs A reserved diverge under B).
 */
export const layer = (worker: string, version: CodeVersion = "A") =>
  ChaosOrder.toLayer(({ orderId }) =>
    Effect.gen(function*() {
      yield* transactional(orderId, version === "B" && renamedByB(orderId) ? "reserveStock" : "reserve", worker)
      const charge = ordinary(orderId, "charge", worker)
      yield* version === "A" ? charge : WorkflowPatch.ifPatched(AUDIT_PATCH, {
        onTrue: () => Effect.andThen(ordinary(orderId, "audit", worker), charge),
        onFalse: () => charge
      })
      const approval = yield* DurableDeferred.await(Approved)
      yield* DurableClock.sleep({ name: "cool-off", duration: "1 second", inMemoryThreshold: Duration.zero })
      yield* ordinary(orderId, "ship", worker)
      yield* transactional(orderId, "confirm", worker)
      if (version === "B") yield* ordinary(orderId, "receipt", worker)
      return `${orderId}:${approval}:shipped`
    })
  )

/** One line of the producer's journal. */
export interface JournalEntry {
  readonly orderId: string
  /** Started: the start committed; RolledBack: rolled back on purpose and recorded; Approved: the deferred is done. */
  readonly outcome: "Started" | "RolledBack" | "Approved"
  readonly retries: number
  readonly errors: ReadonlyArray<string>
  readonly at: number
}
