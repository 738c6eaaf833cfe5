/**
 * The PostgreSQL driver of the engine's storage contract (`storeContract.ts`): its statements
 * over `workflow_executions` and `workflow_steps`, each joining the caller's transaction when
 * there is one. Wakes and starts enqueue their run message atomically with the row they change
 * (a start in one statement with its row, a wake in its transaction): a run is due iff the
 * change committed.
 */
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import type { Settings } from "@effect-durable/pg/DurableConfig"
import { classifySqlErrors } from "@effect-durable/pg/ErrorClassification"
import type * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxStatements from "@effect-durable/pg/OutboxStatements"
import * as Transactions from "@effect-durable/pg/Transactions"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import * as Starts from "./starts.js"
import * as StoreCalls from "./storeCalls.js"

export * from "./storeContract.js"
import type { Status, StepKind, StepRow, Store, WakeMode } from "./storeContract.js"
import { chunksOf, clockTopic, onlyDatabaseErrors, runMessage } from "./storeContract.js"

/** Rolls a transactional activity's transaction back when the activity suspended. */
class Suspension {
  readonly _tag = "Suspension"
}

export const make = (
  sql: SqlClient.SqlClient,
  settings: Settings,
  outbox: Outbox.Outbox["Service"],
  statements: OutboxStatements.OutboxStatements["Service"]
): Store => {
  const executions = sql.literal(settings.table("workflow_executions"))
  const steps = sql.literal(settings.table("workflow_steps"))
  const json = (value: unknown) => JSON.stringify(value ?? null)
  const batchedStarts = Starts.resolver(sql, executions, statements)
  const inTransaction = Effect.map(Effect.serviceOption(sql.transactionService), Option.isSome)
  const calls = StoreCalls.make(sql, executions, steps, inTransaction)
  // A connection lost mid-transaction is a retryable DatabaseError here, never a defect (which
  // a run would capture as the workflow's outcome).
  const transact = <A, E, R>(operation: string, body: Effect.Effect<A, E, R>) =>
    Transactions.transaction(operation)(body).pipe(Effect.provideService(SqlClient.SqlClient, sql))
  const enqueue = (topic: string, payload: unknown, options: Outbox.EnqueueOptions) =>
    onlyDatabaseErrors(outbox.enqueue(topic, payload, options))
  const enqueueRun = (
    workflow: string,
    executionId: string,
    group: string | null | undefined,
    pinnedTo: string | null
  ) => {
    const message = runMessage(workflow, executionId, group, pinnedTo)
    return enqueue(message.topic, message.payload, message.options)
  }

  /** The version an execution's runs are pinned to (`e`'s), as a column `pinned_to`. */
  const pinnedTo = sql`CASE WHEN e.pinned THEN e.deploy_version END AS pinned_to`

  const wakeIn = (workflow: string, executionId: string, mode: WakeMode) =>
    Effect.gen(function*() {
      const explicit = mode === "explicit"
      // An automatic wake (a deferred, a clock, a child) does not wake an execution that
      // suspended on its own failure (`SuspendOnFailure`): only `resume` does, as upstream.
      const rows = yield* sql<{ before: Status; after: Status; run_group: string | null; pinned_to: string | null }>`
        WITH before AS (
          SELECT status FROM ${executions} WHERE workflow = ${workflow} AND execution_id = ${executionId} FOR UPDATE)
        UPDATE ${executions} e SET
          wake_seq = e.wake_seq + 1,
          resume_requested = e.resume_requested OR ${explicit},
          status = CASE WHEN e.status = 'suspended'
                         AND (${explicit} OR coalesce((e.result ->> 'failed')::boolean, false) = false)
                        THEN 'pending' ELSE e.status END,
          updated_at = now()
          FROM before
         WHERE e.workflow = ${workflow} AND e.execution_id = ${executionId}
        RETURNING before.status AS before, e.status AS after, e.run_group, ${pinnedTo}`
      const row = rows[0]
      if (row !== undefined && row.before === "suspended" && row.after === "pending") {
        yield* enqueueRun(workflow, executionId, row.run_group, row.pinned_to)
      }
    })

  /**
   * A step's record in one statement (batched with the records of the same tick). The record
   * that stood before the statement began is read in it; one committed by a racing writer while
   * it ran is read after.
   */
  const recordAlone: Store["recordStep"] = (workflow, executionId, kind, name, attempt, result) =>
    Effect.flatMap(
      calls.record({ workflow, executionId, kind, name, attempt, result }),
      (recorded) =>
        recorded.result !== undefined
          ? Effect.succeed(recorded)
          : recordedStep(workflow, executionId, kind, name, attempt).pipe(
            classifySqlErrors("WorkflowEngine.recordStep")
          )
    )

  /** The record that stands when an insert found one. */
  const recordedStep = (workflow: string, executionId: string, kind: StepKind, name: string, attempt: number) =>
    Effect.map(
      sql<{ result: unknown }>`
        SELECT result FROM ${steps} WHERE workflow = ${workflow} AND execution_id = ${executionId}
           AND kind = ${kind} AND name = ${name} AND attempt = ${attempt}`,
      (rows) => ({ inserted: false, result: rows[0]?.result })
    )

  type Settle = Parameters<Store["settle"]>[0]
  type Settled = Effect.Success<ReturnType<Store["settle"]>>
  const fenced = { fenced: false, status: undefined } as const
  /** What a completion sets on its execution row. */
  const completion = (result: unknown) =>
    sql`status = 'complete', result = ${
      json(result)
    }::jsonb, completed_at = now(), updated_at = now(), waiting_on = NULL`
  /**
   * Whether a suspending run's execution runs again at once (settles pending): a wake landed
   * since `wakeSeq` that may wake it (an automatic one not on its own failure), or `rerun` asks.
   */
  const runsAgain = ({ failed, rerun, wakeSeq }: Settle) =>
    sql`${rerun} OR (wake_seq > ${wakeSeq}::bigint AND (resume_requested OR NOT ${failed}))`

  /**
   * The settle in one statement, under the claim's fence, when it needs nothing more: a
   * completion with no parent to wake and no clock to withdraw, a suspension that schedules no
   * run. `undefined` when it needs more (the transaction, `settleInTransaction`, decides again).
   */
  const settleAlone = (options: Settle) => {
    const { claim, complete, executionId, result, waits, workflow } = options
    return Effect.map(
      statements.whileHolding(claim, (held) =>
        complete
          ? sql`UPDATE ${executions} e SET ${completion(result)}
                 WHERE workflow = ${workflow} AND execution_id = ${executionId} AND status <> 'complete' AND ${held}
                   AND e.parent_workflow IS NULL
                   AND NOT EXISTS (SELECT 1 FROM ${steps} s WHERE s.workflow = e.workflow AND s.execution_id = e.execution_id
                                      AND s.kind = 'clock' AND s.outbox_id IS NOT NULL)
                RETURNING 1 AS settled`
          : sql`UPDATE ${executions} SET status = 'suspended', result = ${json(result)}::jsonb, updated_at = now(),
                       waiting_on = ${json(waits)}::jsonb
                 WHERE workflow = ${workflow} AND execution_id = ${executionId} AND status <> 'complete' AND ${held}
                   AND NOT (${runsAgain(options)})
                RETURNING 1 AS settled`),
      (outcome): Settled | undefined =>
        !outcome.held
          ? fenced
          : outcome.rows.length > 0
          ? { fenced: true, status: complete ? "complete" : "suspended" }
          : undefined
    )
  }

  /** The settle in one transaction: the fence, the execution, and what it wakes, withdraws or schedules. */
  const settleInTransaction = (options: Settle) => {
    const { claim, complete, executionId, result, waits, workflow } = options
    return transact(
      "WorkflowEngine.settle",
      Effect.gen(function*() {
        // The fence: the run message still held by this claim, its lease alive (its row locked to the end).
        const fence = yield* statements.whileHolding(claim, (held) => sql`SELECT 1 WHERE ${held}`)
        if (!fence.held) return fenced
        if (complete) {
          // With its clocks: those that have not fired have nothing left to wake, so the
          // unclaimed ones are withdrawn (they carry no ordering key: no other message waits on them).
          const rows = yield* sql<
            { parent_workflow: string | null; parent_execution_id: string | null; clocks: ReadonlyArray<string> }
          >`
              UPDATE ${executions} e SET ${completion(result)}
               WHERE workflow = ${workflow} AND execution_id = ${executionId} AND status <> 'complete'
              RETURNING parent_workflow, parent_execution_id,
                        (SELECT coalesce(jsonb_agg(s.outbox_id::text), '[]'::jsonb) FROM ${steps} s
                          WHERE s.workflow = e.workflow AND s.execution_id = e.execution_id AND s.kind = 'clock'
                            AND s.outbox_id IS NOT NULL) AS clocks`
          yield* Effect.forEach(
            chunksOf(rows[0]?.clocks ?? []),
            (ids) => onlyDatabaseErrors(outbox.withdraw(ids)),
            { discard: true }
          )
          const parent = rows[0]
          if (parent?.parent_workflow != null && parent.parent_execution_id !== null) {
            yield* wakeIn(parent.parent_workflow, parent.parent_execution_id, "automatic")
          }
          return { fenced: true, status: "complete" as const }
        }
        const rows = yield* sql<{ status: Status; run_group: string | null; pinned_to: string | null }>`
            UPDATE ${executions} e SET
              status = CASE WHEN ${runsAgain(options)} THEN 'pending' ELSE 'suspended' END,
              result = ${json(result)}::jsonb, updated_at = now(), waiting_on = ${json(waits)}::jsonb
             WHERE workflow = ${workflow} AND execution_id = ${executionId} AND status <> 'complete'
            RETURNING status, run_group, ${pinnedTo}`
        const status = rows[0]?.status
        if (status === "pending") yield* enqueueRun(workflow, executionId, rows[0]!.run_group, rows[0]!.pinned_to)
        return { fenced: true, status }
      })
    )
  }

  return {
    start: ({ attributes, executionId, group, parent, payload, pinned, version, workflow }) =>
      Effect.gen(function*() {
        const text = yield* Effect.orDie(Fingerprint.canonicalize(payload))
        const fingerprint = Fingerprint.toHex(Fingerprint.fingerprintOfCanonical(text))
        // In a caller's transaction: the execution row and its first run message in one statement,
        // one round trip. Started before: its payload compared, a mismatch counted.
        const start = Effect.gen(function*() {
          const id = yield* onlyDatabaseErrors(statements.enqueueAfter(
            sql`INSERT INTO ${executions} (workflow, execution_id, payload, payload_fingerprint, parent_workflow,
                                           parent_execution_id, attributes, run_group, deploy_version, pinned)
                VALUES (${workflow}, ${executionId}, ${text}::jsonb, ${fingerprint}, ${parent?.workflow ?? null}, ${
              parent?.executionId ?? null
            }, ${json(attributes)}::jsonb, ${group ?? null}, ${version ?? null}, ${pinned})
                ON CONFLICT (workflow, execution_id) DO NOTHING
                RETURNING 1`,
            runMessage(workflow, executionId, group, pinned ? version : null)
          ))
          if (id !== undefined) return { started: true, mismatch: false }
          const mismatched = yield* sql<{ n: number }>`
            UPDATE ${executions} SET payload_mismatches = payload_mismatches + 1
             WHERE workflow = ${workflow} AND execution_id = ${executionId} AND payload_fingerprint <> ${fingerprint}
            RETURNING payload_mismatches AS n`.pipe(classifySqlErrors("WorkflowEngine.execute"))
          return { started: false, mismatch: mismatched.length > 0 }
        })
        // In a caller's transaction, under a savepoint: a failure leaves the caller's transaction
        // usable. Outside one: batched with the workflow's other starts of this tick (`starts.ts`).
        if (yield* inTransaction) return yield* transact("WorkflowEngine.execute", start)
        return yield* Effect.request(
          Starts.Start({
            workflow,
            executionId,
            text,
            fingerprint,
            parent,
            attributes: json(attributes),
            group,
            version,
            pinned
          }),
          batchedStarts
        )
      }),
    read: calls.read,
    beginRun: calls.beginRun,
    step: (workflow, executionId, kind, name, attempt) =>
      sql<StepRow>`SELECT kind, name, attempt, result FROM ${steps}
                    WHERE workflow = ${workflow} AND execution_id = ${executionId}
                      AND kind = ${kind} AND name = ${name} AND attempt = ${attempt}`.pipe(
        Effect.map((rows) => rows[0]),
        classifySqlErrors("WorkflowEngine.step")
      ),
    recordStep: (workflow, executionId, kind, name, attempt, result) =>
      kind !== "deferred" ? recordAlone(workflow, executionId, kind, name, attempt, result) : transact(
        "WorkflowEngine.recordStep",
        Effect.gen(function*() {
          const inserted = yield* sql<{ result: unknown }>`
            INSERT INTO ${steps} (workflow, execution_id, kind, name, attempt, result)
            VALUES (${workflow}, ${executionId}, ${kind}, ${name}, ${attempt}, ${json(result)}::jsonb)
            ON CONFLICT DO NOTHING
            RETURNING result`
          if (inserted.length > 0) {
            if (kind === "deferred") yield* wakeIn(workflow, executionId, "automatic")
            return { inserted: true, result: inserted[0]!.result }
          }
          return yield* recordedStep(workflow, executionId, kind, name, attempt)
        })
      ),
    transactionalStep: (workflow, executionId, name, attempt, body) =>
      transact(
        "WorkflowEngine.transactionalActivity",
        Effect.gen(function*() {
          const taken = yield* sql<{ taken: boolean }>`
            INSERT INTO ${steps} (workflow, execution_id, kind, name, attempt)
            VALUES (${workflow}, ${executionId}, 'activity', ${name}, ${attempt})
            ON CONFLICT DO NOTHING
            RETURNING true AS taken`
          if (taken.length === 0) {
            return yield* recordedStep(workflow, executionId, "activity", name, attempt)
          }
          const result = yield* body
          if (result === undefined) return yield* Effect.fail(new Suspension())
          yield* sql`UPDATE ${steps} SET result = ${json(result)}::jsonb
                      WHERE workflow = ${workflow} AND execution_id = ${executionId}
                        AND kind = 'activity' AND name = ${name} AND attempt = ${attempt}`
          return { inserted: true, result }
        })
      ).pipe(Effect.catchTag("Suspension", () => Effect.succeed(undefined))),
    wake: (workflow, executionId, mode) => transact("WorkflowEngine.resume", wakeIn(workflow, executionId, mode)),
    requestInterrupt: (workflow, executionId, unsafe) =>
      transact(
        "WorkflowEngine.interrupt",
        Effect.gen(function*() {
          const rows = yield* sql<{ status: Status }>`
            UPDATE ${executions} SET interrupt_requested = true, interrupt_unsafe = interrupt_unsafe OR ${unsafe},
                   updated_at = now()
             WHERE workflow = ${workflow} AND execution_id = ${executionId} AND status <> 'complete'
            RETURNING status`
          if (rows.length === 0) return false
          yield* wakeIn(workflow, executionId, "explicit")
          return true
        })
      ),
    scheduleClock: (workflow, executionId, name, deferredName, delay) =>
      transact(
        "WorkflowEngine.scheduleClock",
        Effect.gen(function*() {
          const inserted = yield* sql<{ name: string }>`
            INSERT INTO ${steps} (workflow, execution_id, kind, name, attempt)
            VALUES (${workflow}, ${executionId}, 'clock', ${name}, 0)
            ON CONFLICT DO NOTHING RETURNING name`
          if (inserted.length === 0) return
          // No ordering key: a delayed message of the execution's key would hold back its
          // later runs (a key's messages are delivered in id order).
          const id = yield* enqueue(clockTopic(workflow), { executionId, deferredName }, { delay })
          yield* sql`UPDATE ${steps} SET outbox_id = ${id}::bigint
                      WHERE workflow = ${workflow} AND execution_id = ${executionId} AND kind = 'clock' AND name = ${name}
                        AND attempt = 0`
        })
      ),
    settle: (options) =>
      Effect.flatMap(
        settleAlone(options),
        (alone) => alone === undefined ? settleInTransaction(options) : Effect.succeed(alone)
      )
  }
}
