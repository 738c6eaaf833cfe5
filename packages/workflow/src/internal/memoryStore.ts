/**
 * The in-memory driver of the engine's storage contract (`storeContract.ts`): executions and
 * their journal in one process's maps, their run and clock messages in the outbox it is given
 * (`OutboxMemory`, whose claims fence settles as PostgreSQL's do). For tests of workflow code
 * on `TestClock`, in milliseconds; nothing is durable.
 *
 * Each call changes its maps in one synchronous step (no other fiber runs inside it), then
 * enqueues what the change made due: a run message is there iff its change was made. Where
 * PostgreSQL has a transaction, memory has none: a transactional activity's body runs outside
 * one (there is no SQL to roll back), and two runs of one execution (one that lost its lease)
 * may both run a step's body; the first record stands, as on PostgreSQL.
 */
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import type * as Outbox from "@effect-durable/pg/Outbox"
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Effect from "effect/Effect"
import type { ExecutionRow, Status, StepKind, StepRow, Store, WaitingOn, WakeMode } from "./storeContract.js"
import { chunksOf, clockTopic, journalKey, onlyDatabaseErrors, runId, runMessage } from "./storeContract.js"

interface Execution {
  readonly incarnation: string
  readonly fingerprint: string
  readonly payload: unknown
  readonly parent: { readonly workflow: string; readonly executionId: string } | undefined
  readonly group: string | undefined
  readonly version: string | undefined
  /** Its runs go to its version's topic (`runTopic`). */
  readonly pinned: boolean
  readonly attributes: Readonly<Record<string, string>>
  readonly steps: Map<string, StepRow & { outboxId?: string }>
  status: Status
  result: unknown
  /** The last settle suspended it on its own failure: only an explicit wake (resume) wakes it. */
  failed: boolean
  wakeSeq: number
  resumeRequested: boolean
  interruptRequested: boolean
  interruptUnsafe: boolean
  payloadMismatches: number
  runs: number
  waits: ReadonlyArray<WaitingOn> | null
}

const asJson = (value: unknown): unknown => JSON.parse(JSON.stringify(value ?? null))

/** An execution as a replay seeds it (`replayer.ts`): its payload and the journal taken from elsewhere. */
export interface Seed {
  readonly workflow: string
  readonly executionId: string
  readonly payload: unknown
  readonly steps: ReadonlyArray<StepRow>
}

/** The contract, and what a replay of a journal taken from elsewhere needs beside it. */
export interface MemoryStore extends Store {
  /** Puts `seed` in place of any execution of its id, pending with its journal, and enqueues its run. */
  readonly seed: (seed: Seed) => Effect.Effect<void>
  /** Where an execution stands, with what its last settle said it waits on. */
  readonly inspect: (
    workflow: string,
    executionId: string
  ) =>
    | { readonly status: Status; readonly waits: ReadonlyArray<WaitingOn> | null; readonly result: unknown }
    | undefined
}

/** The contract over maps, enqueuing through `outbox` and fencing settles by `worker.holds`. */
export const make = (outbox: Outbox.Outbox["Service"], worker: OutboxWorker.OutboxWorker["Service"]): MemoryStore => {
  const executions = new Map<string, Execution>()
  let started = 0
  /** Orders the journal, as `recorded_at` does on PostgreSQL. */
  let recorded = 0
  const find = (workflow: string, executionId: string) => executions.get(runId(workflow, executionId))
  const rowOf = (execution: Execution): ExecutionRow => ({
    incarnation: execution.incarnation,
    status: execution.status,
    result: execution.result,
    payload: execution.payload,
    interrupt_requested: execution.interruptRequested,
    interrupt_unsafe: execution.interruptUnsafe,
    parent_workflow: execution.parent?.workflow ?? null,
    parent_execution_id: execution.parent?.executionId ?? null,
    pinned_to: execution.pinned ? execution.version ?? null : null
  })
  const enqueueRun = (workflow: string, executionId: string) => {
    const execution = find(workflow, executionId)
    const message = runMessage(
      workflow,
      executionId,
      execution?.group,
      execution?.pinned === true ? execution.version : null
    )
    return Effect.asVoid(onlyDatabaseErrors(outbox.enqueue(message.topic, message.payload, message.options)))
  }

  /** Bumps the wake sequence; whether a suspended execution became pending (its run to enqueue). */
  const wakeNow = (execution: Execution, mode: WakeMode): boolean => {
    execution.wakeSeq++
    if (mode === "explicit") execution.resumeRequested = true
    if (execution.status !== "suspended" || (mode === "automatic" && execution.failed)) return false
    execution.status = "pending"
    return true
  }
  const wake = (workflow: string, executionId: string, mode: WakeMode) =>
    Effect.suspend(() => {
      const execution = find(workflow, executionId)
      return execution !== undefined && wakeNow(execution, mode)
        ? enqueueRun(workflow, executionId)
        : Effect.void
    })

  /**
   * Records a step unless one stands; the record that stands, and whether it is this one. Kept
   * as JSON, as PostgreSQL keeps it: what a `jsonb` column would change or refuse does not pass
   * here either, and a later change to the value does not change the journal.
   */
  const record = (execution: Execution, kind: StepKind, name: string, attempt: number, result: unknown) => {
    const standing = execution.steps.get(journalKey(kind, name, attempt))
    if (standing !== undefined) return { inserted: false, result: standing.result }
    const stored: unknown = asJson(result)
    execution.steps.set(journalKey(kind, name, attempt), { kind, name, attempt, result: stored, recorded: ++recorded })
    return { inserted: true, result: stored }
  }

  /** A new execution's row, pending. */
  const created = (options: {
    readonly fingerprint: string
    readonly payload: unknown
    readonly parent: Execution["parent"]
    readonly group: string | undefined
    readonly version: string | undefined
    readonly pinned: boolean
    readonly attributes: Execution["attributes"]
    readonly steps: Execution["steps"]
  }): Execution => ({
    incarnation: String(++started),
    ...options,
    status: "pending",
    result: null,
    failed: false,
    wakeSeq: 0,
    resumeRequested: false,
    interruptRequested: false,
    interruptUnsafe: false,
    payloadMismatches: 0,
    runs: 0,
    waits: null
  })

  return {
    start: ({ attributes, executionId, group, parent, payload, pinned, version, workflow }) =>
      Effect.gen(function*() {
        const text = yield* Effect.orDie(Fingerprint.canonicalize(payload))
        const fingerprint = Fingerprint.toHex(Fingerprint.fingerprintOfCanonical(text))
        const existing = find(workflow, executionId)
        if (existing !== undefined) {
          const mismatch = existing.fingerprint !== fingerprint
          if (mismatch) existing.payloadMismatches++
          return { started: false, mismatch }
        }
        executions.set(
          runId(workflow, executionId),
          created({
            fingerprint,
            payload: JSON.parse(text),
            parent,
            group,
            version,
            pinned,
            attributes,
            steps: new Map()
          })
        )
        yield* enqueueRun(workflow, executionId)
        return { started: true, mismatch: false }
      }),
    seed: ({ executionId, payload, steps, workflow }) =>
      Effect.suspend(() => {
        executions.set(
          runId(workflow, executionId),
          created({
            fingerprint: "",
            payload: asJson(payload),
            parent: undefined,
            group: undefined,
            version: undefined,
            pinned: false,
            attributes: {},
            steps: new Map(steps.map((step) => [journalKey(step.kind, step.name, step.attempt), step]))
          })
        )
        return Effect.orDie(enqueueRun(workflow, executionId))
      }),
    inspect: (workflow, executionId) => {
      const execution = find(workflow, executionId)
      return execution === undefined
        ? undefined
        : { status: execution.status, waits: execution.waits, result: execution.result }
    },
    read: (workflow, executionId) =>
      Effect.sync(() => {
        const execution = find(workflow, executionId)
        return execution === undefined ? undefined : rowOf(execution)
      }),
    beginRun: (workflow, executionId) =>
      Effect.sync(() => {
        const execution = find(workflow, executionId)
        if (execution === undefined || execution.status === "complete") return undefined
        execution.status = "running"
        execution.runs++
        execution.resumeRequested = false
        return { row: rowOf(execution), wakeSeq: String(execution.wakeSeq), steps: [...execution.steps.values()] }
      }),
    step: (workflow, executionId, kind, name, attempt) =>
      Effect.sync(() => find(workflow, executionId)?.steps.get(journalKey(kind, name, attempt))),
    recordStep: (workflow, executionId, kind, name, attempt, result) =>
      Effect.suspend(() => {
        const execution = find(workflow, executionId)
        // No execution, no journal: as PostgreSQL's foreign key would refuse it, nothing stands.
        if (execution === undefined) return Effect.die(`no execution ${workflow} ${executionId} to record a step of`)
        const recorded = record(execution, kind, name, attempt, result)
        return recorded.inserted && kind === "deferred" && wakeNow(execution, "automatic")
          ? Effect.as(enqueueRun(workflow, executionId), recorded)
          : Effect.succeed(recorded)
      }),
    transactionalStep: (workflow, executionId, name, attempt, body) =>
      Effect.gen(function*() {
        const standing = find(workflow, executionId)?.steps.get(journalKey("activity", name, attempt))
        if (standing !== undefined) return { inserted: false, result: standing.result }
        const result = yield* body
        if (result === undefined) return undefined
        const execution = find(workflow, executionId)
        if (execution === undefined) return yield* Effect.die(`no execution ${workflow} ${executionId}`)
        return record(execution, "activity", name, attempt, result)
      }),
    wake,
    requestInterrupt: (workflow, executionId, unsafe) =>
      Effect.suspend(() => {
        const execution = find(workflow, executionId)
        if (execution === undefined || execution.status === "complete") return Effect.succeed(false)
        execution.interruptRequested = true
        execution.interruptUnsafe ||= unsafe
        return Effect.as(
          wakeNow(execution, "explicit") ? enqueueRun(workflow, executionId) : Effect.void,
          true
        )
      }),
    scheduleClock: (workflow, executionId, name, deferredName, delay) =>
      Effect.gen(function*() {
        const execution = find(workflow, executionId)
        if (execution === undefined || !record(execution, "clock", name, 0, null).inserted) return
        // No ordering key: a delayed message of the execution's key would hold back its later runs.
        const id = yield* onlyDatabaseErrors(
          outbox.enqueue(clockTopic(workflow), { executionId, deferredName }, { delay })
        )
        execution.steps.set(journalKey("clock", name, 0), {
          kind: "clock",
          name,
          attempt: 0,
          result: null,
          outboxId: id
        })
      }),
    settle: ({ claim, complete, executionId, failed, rerun, result, wakeSeq, waits, workflow }) =>
      Effect.gen(function*() {
        if (!(yield* worker.holds(claim))) return { fenced: false, status: undefined }
        const execution = find(workflow, executionId)
        if (execution === undefined || execution.status === "complete") {
          return { fenced: true, status: complete ? "complete" as const : undefined }
        }
        execution.result = asJson(result)
        if (complete) {
          execution.status = "complete"
          execution.waits = null
          // Its clocks that have not fired have nothing left to wake.
          const clocks = [...execution.steps.values()].flatMap((step) =>
            step.kind === "clock" && step.outboxId !== undefined ? [step.outboxId] : []
          )
          const parent = execution.parent === undefined
            ? undefined
            : find(execution.parent.workflow, execution.parent.executionId)
          const parentWoken = parent !== undefined && wakeNow(parent, "automatic")
          yield* Effect.forEach(chunksOf(clocks), (ids) => onlyDatabaseErrors(outbox.withdraw(ids)), { discard: true })
          if (parentWoken) yield* enqueueRun(execution.parent!.workflow, execution.parent!.executionId)
          return { fenced: true, status: "complete" as const }
        }
        const runsAgain = rerun || (execution.wakeSeq > Number(wakeSeq) && (execution.resumeRequested || !failed))
        execution.status = runsAgain ? "pending" : "suspended"
        execution.failed = failed
        execution.waits = waits
        if (runsAgain) yield* enqueueRun(workflow, executionId)
        return { fenced: true, status: execution.status }
      })
  }
}
