/**
 * What an execution waits on, as `WorkflowAdmin` shows it: the waits its last run recorded, a
 * limit its next run is queued behind, and `show`'s detail of them (a clock's due time, a
 * child's status now).
 */
import type { Settings } from "@effect-durable/pg/DurableConfig"
import { classifySqlErrors } from "@effect-durable/pg/ErrorClassification"
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import type * as Store from "./store.js"

/**
 * What a suspended execution waits on, as its last run recorded it (`Store.WaitingOn`); or, for
 * a pending execution of a workflow with limits (`WorkflowLimits`), the limit its next run is
 * queued behind (with its group, if it has one).
 */
export type WaitingOn = Store.WaitingOn | { readonly kind: "limit"; readonly group: string | null }

/** A wait as `show` details it: a clock with its due time, a child with its status. */
export type WaitDetail =
  | { readonly kind: "deferred"; readonly name: string }
  | {
    readonly kind: "clock"
    readonly name: string
    /** When it fires (its outbox message's due time); null when the message is not waiting (fired, dead). */
    readonly dueAt: string | null
  }
  | {
    readonly kind: "child"
    readonly workflow: string
    readonly executionId: string
    /** The child's status now; null when it is gone. */
    readonly status: Store.Status | null
  }
  | { readonly kind: "resume" }
  | { readonly kind: "limit"; readonly group: string | null }

/** Each clock's due time (its open message's), each child's status now. */
export const make = (sql: SqlClient.SqlClient, settings: Settings) => {
  const executions = sql.literal(settings.table("workflow_executions"))
  const steps = sql.literal(settings.table("workflow_steps"))
  const outbox = sql.literal(settings.table("outbox"))
  return (workflow: string, executionId: string, waits: ReadonlyArray<WaitingOn>) =>
    Effect.gen(function*() {
      const clocks = waits.flatMap((wait) => wait.kind === "clock" ? [wait.name] : [])
      const children = waits.flatMap((wait) => wait.kind === "child" ? [wait] : [])
      const due = clocks.length === 0 ? [] : yield* sql<{ name: string; due_at: string }>`
        SELECT s.name, o.available_at::text AS due_at FROM ${steps} s JOIN ${outbox} o ON o.id = s.outbox_id
         WHERE s.workflow = ${workflow} AND s.execution_id = ${executionId} AND s.kind = 'clock'
           AND s.name = ANY(${clocks}::text[])`.pipe(classifySqlErrors("WorkflowAdmin.show"))
      const statuses = children.length === 0 ? [] : yield* sql<
        { workflow: string; execution_id: string; status: Store.Status }
      >`
        SELECT workflow, execution_id, status FROM ${executions}
         WHERE (workflow, execution_id) IN (SELECT * FROM unnest(${children.map((c) => c.workflow)}::text[], ${
        children.map((c) => c.executionId)
      }::text[]))`.pipe(classifySqlErrors("WorkflowAdmin.show"))
      return waits.map((wait): WaitDetail =>
        wait.kind === "clock"
          ? { ...wait, dueAt: due.find((row) => row.name === wait.name)?.due_at ?? null }
          : wait.kind === "child"
          ? {
            ...wait,
            status: statuses.find((row) => row.workflow === wait.workflow && row.execution_id === wait.executionId)
              ?.status ?? null
          }
          : wait
      )
    })
}
