/**
 * What an execution waits on, as `WorkflowAdmin` shows it: the waits its last run recorded, a
 * limit its next run is queued behind, and `show`'s detail of them (a clock's due time, a
 * child's status now).
 */
import type { Settings } from "@effect-durable/pg/DurableConfig"
import { classifySqlErrors } from "@effect-durable/pg/ErrorClassification"
import type * as Outbox from "@effect-durable/pg/Outbox"
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import * as Store from "./store.js"

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
  | { readonly kind: "diverged"; readonly step: string; readonly unreached: ReadonlyArray<string> }
  | { readonly kind: "limit"; readonly group: string | null }

/** Each clock's due time (its open message's), each child's status now. */
export const make = (sql: SqlClient.SqlClient, settings: Settings, outbox: Outbox.Outbox["Service"]) => {
  const executions = sql.literal(settings.table("workflow_executions"))
  const steps = sql.literal(settings.table("workflow_steps"))
  return (workflow: string, executionId: string, waits: ReadonlyArray<WaitingOn>) =>
    Effect.gen(function*() {
      const clocks = waits.flatMap((wait) => wait.kind === "clock" ? [wait.name] : [])
      const children = waits.flatMap((wait) => wait.kind === "child" ? [wait] : [])
      const messages = clocks.length === 0 ? [] : yield* sql<{ name: string; id: string }>`
        SELECT name, outbox_id::text AS id FROM ${steps}
         WHERE workflow = ${workflow} AND execution_id = ${executionId} AND kind = 'clock'
           AND name = ANY(${clocks}::text[]) AND outbox_id IS NOT NULL`.pipe(classifySqlErrors("WorkflowAdmin.show"))
      // Each clock's message, while it waits to fire: when it is due.
      const open = new Map<string, string>()
      for (const ids of Store.chunksOf(messages.map((message) => message.id))) {
        for (const message of yield* Store.onlyDatabaseErrors(outbox.waiting(ids))) {
          open.set(message.id, message.availableAt)
        }
      }
      const due = messages.map((message) => ({ name: message.name, due_at: open.get(message.id) ?? null }))
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
