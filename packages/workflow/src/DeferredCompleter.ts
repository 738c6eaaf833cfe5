/**
 * Completing a workflow's deferred from outside, by its signed token (`DeferredTokens.sign`):
 * a payment provider's callback, an approval link's form, a broker's message. The caller holds
 * the token and gives the value (or the error) the deferred waits for; `complete` runs in the
 * caller's transaction when there is one (so a callback's own writes and the completion commit
 * together or not at all), else in one of its own:
 *
 * - the receipt is taken in the inbox (consumer `workflow.deferred`, keyed by the deferred, the
 *   execution's incarnation and the exit it carries), so a repeat is recognized and answered
 *   as it was (`already-completed`);
 * - the value is decoded with the deferred's own schema and written to the engine's journal as
 *   the engine writes a deferred completed in another process (first write wins, the execution
 *   woken in the same transaction);
 * - a different value for a deferred that already has one, a token for a complete or unknown
 *   execution, a token that does not open, a deferred not listed here and a value not of the
 *   deferred's schema are typed errors, and write nothing.
 *
 * `@effect-durable/workflow-http`'s `DeferredEndpoint` serves it over HTTP; this module needs
 * no HTTP stack.
 *
 * @since 0.2.0
 */
import { type DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Inbox from "@effect-durable/pg/Inbox"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxStatements from "@effect-durable/pg/OutboxStatements"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import * as SqlClient from "effect/sql/SqlClient"
import type * as DurableDeferred from "effect/workflow/DurableDeferred"
import { DeferredTokens, type InvalidDeferredToken } from "./DeferredTokens.js"
import * as Codec from "./internal/codec.js"
import * as Preemption from "./internal/preemption.js"
import * as Store from "./internal/store.js"

/** The inbox consumer the completions' receipts are kept under. */
export const CONSUMER = "workflow.deferred"

/** The deferred is not one this completer completes (not in its `deferreds`). */
export class UnknownDeferred extends Schema.TaggedError<UnknownDeferred>("@effect-durable/workflow/UnknownDeferred")(
  "UnknownDeferred",
  { deferred: Schema.String }
) {
  override get message() {
    return `deferred ${this.deferred} is not completed here`
  }
}

/** The token names an execution that does not exist (never started, or purged). */
export class ExecutionNotFound
  extends Schema.TaggedError<ExecutionNotFound>("@effect-durable/workflow/ExecutionNotFound")("ExecutionNotFound", {
    workflow: Schema.String,
    executionId: Schema.String
  })
{
  override get message() {
    return `workflow ${this.workflow} has no execution ${this.executionId}`
  }
}

/** Nothing waits for the deferred any more: its execution is complete. */
export class ExecutionComplete
  extends Schema.TaggedError<ExecutionComplete>("@effect-durable/workflow/ExecutionComplete")("ExecutionComplete", {
    workflow: Schema.String,
    executionId: Schema.String
  })
{
  override get message() {
    return `workflow ${this.workflow} execution ${this.executionId} is complete`
  }
}

/** The deferred already holds another value (first write wins); nothing was written. */
export class DeferredAlreadyCompleted extends Schema.TaggedError<DeferredAlreadyCompleted>(
  "@effect-durable/workflow/DeferredAlreadyCompleted"
)("DeferredAlreadyCompleted", { deferred: Schema.String, executionId: Schema.String }) {
  override get message() {
    return `deferred ${this.deferred} of execution ${this.executionId} was already completed with another value`
  }
}

/** A value or error that the deferred's schema does not accept (`path` says where, never the value). */
export class InvalidDeferredValue
  extends Schema.TaggedError<InvalidDeferredValue>("@effect-durable/workflow/InvalidDeferredValue")(
    "InvalidDeferredValue",
    { deferred: Schema.String, field: Schema.Literals(["value", "error"]), path: Schema.String }
  )
{
  override get message() {
    return `the ${this.field} does not match deferred ${this.deferred}'s schema at ${this.path}`
  }
}

export type CompleteError =
  | InvalidDeferredToken
  | UnknownDeferred
  | InvalidDeferredValue
  | ExecutionNotFound
  | ExecutionComplete
  | DeferredAlreadyCompleted
  | InvalidInput
  | DatabaseError

/** What a completion did: `completed` this call; `already-completed` an earlier one with the same exit. */
export interface Completed {
  readonly outcome: "completed" | "already-completed"
  readonly workflow: string
  readonly executionId: string
  readonly deferred: string
}

/** What `complete` takes: the signed token and exactly one of `value` and `error` (none for a void deferred). */
export interface Completion {
  readonly token: string
  readonly value?: unknown
  readonly error?: unknown
}

export type Requirements =
  | DeferredTokens
  | Inbox.Inbox
  | SqlClient.SqlClient
  | DurableSettings
  | Outbox.Outbox
  | OutboxStatements.OutboxStatements

const issuePath = (issue: SchemaIssue.Issue): string => {
  const path: Array<PropertyKey> = []
  let current: SchemaIssue.Issue = issue
  while (current._tag === "Pointer" || current._tag === "Composite" || current._tag === "Filter") {
    if (current._tag === "Pointer") {
      path.push(...current.path)
      current = current.issue
    } else if (current._tag === "Composite") {
      const first = current.issues[0]
      if (first === undefined) break
      current = first
    } else {
      current = current.issue
    }
  }
  return path.length === 0 ? "the top" : path.map(String).join(".")
}

/**
 * A completer over `deferreds` (each named once; a name listed twice is `InvalidInput`).
 * `complete` decodes the value with the deferred's schema and completes it through the engine
 * in the caller's transaction or one of its own, its receipt in the inbox.
 */
export const make = (deferreds: ReadonlyArray<DurableDeferred.AnyWithProps>) =>
  Effect.gen(function*() {
    const byName = new Map<string, DurableDeferred.AnyWithProps>()
    for (const deferred of deferreds) {
      if (byName.has(deferred.name)) {
        return yield* new InvalidInput({ argument: "deferreds", rule: `deferred ${deferred.name} is listed twice` })
      }
      byName.set(deferred.name, deferred)
    }
    const tokens = yield* DeferredTokens
    const inbox = yield* Inbox.Inbox
    const sql = yield* SqlClient.SqlClient
    const store = Store.make(
      sql,
      yield* DurableSettings,
      yield* Outbox.Outbox,
      yield* OutboxStatements.OutboxStatements
    )

    const complete = (completion: Completion): Effect.Effect<Completed, CompleteError> =>
      Effect.gen(function*() {
        if (completion.value !== undefined && completion.error !== undefined) {
          return yield* new InvalidInput({ argument: "completion", rule: "give either a value or an error, not both" })
        }
        const opened = yield* tokens.open(completion.token)
        // A deferred awaited inside an activity is named `<name>/<attempt>` (withActivityAttempt).
        const baseName = opened.deferredName.replace(/\/\d+$/, "")
        const deferred = byName.get(opened.deferredName) ?? byName.get(baseName)
        if (deferred === undefined) return yield* new UnknownDeferred({ deferred: opened.deferredName })
        const failed = completion.error !== undefined
        const field = failed ? "error" : "value"
        const schema = Schema.toCodecJson(
          failed ? deferred.errorSchema : deferred.successSchema
        ) as unknown as Schema.Codec<
          unknown,
          unknown
        >
        // JSON has no `undefined`: an absent value is JSON's null, which a void deferred's JSON
        // codec takes (and any other schema refuses, naming the top).
        const given = failed ? completion.error : completion.value
        const decoded = yield* Schema.decodeUnknownEffect(schema)(given === undefined ? null : given).pipe(
          Effect.mapError((error) =>
            new InvalidDeferredValue({ deferred: deferred.name, field, path: issuePath(error.issue) })
          )
        )
        const exit: Exit.Exit<unknown, unknown> = failed ? Exit.fail(decoded) : Exit.succeed(decoded)
        // What the journal will hold: the exit as the deferred's schema encodes it, written as the engine writes it.
        const encodedExit = yield* Schema.encodeEffect(
          deferred.exitSchema as unknown as Schema.Codec<unknown, unknown>
        )(exit).pipe(
          Effect.orDie,
          Effect.flatMap((encoded) => Codec.encodeExit(encoded as Exit.Exit<unknown, unknown>))
        )
        const canonical = yield* Effect.orDie(Fingerprint.canonicalize(encodedExit))
        const named = {
          workflow: opened.workflowName,
          executionId: opened.executionId,
          deferred: opened.deferredName
        }
        // The receipt names the execution's incarnation: once an execution is purged, a callback
        // for it is refused as unknown (its receipt outlived it and answered 200), and the same
        // callback for the execution started again under its id completes that new run.
        const incarnation = yield* store.read(named.workflow, named.executionId)
        if (incarnation === undefined) {
          return yield* new ExecutionNotFound({ workflow: named.workflow, executionId: named.executionId })
        }
        const receipt = Fingerprint.toHex(
          Fingerprint.fingerprintOfCanonical(
            yield* Effect.orDie(
              Fingerprint.canonicalize({ ...named, incarnation: incarnation.incarnation, exit: JSON.parse(canonical) })
            )
          )
        )
        const sameExit = (stored: unknown) =>
          Result.getOrUndefined(Fingerprint.canonicalizeResult(stored)) === canonical
        const conflict = new DeferredAlreadyCompleted({ deferred: named.deferred, executionId: named.executionId })
        const body = Effect.gen(function*() {
          const standing = yield* store.step(named.workflow, named.executionId, "deferred", named.deferred, 0)
          if (standing !== undefined) return sameExit(standing.result) ? "already-completed" as const : yield* conflict
          const execution = yield* store.read(named.workflow, named.executionId)
          if (execution === undefined || execution.incarnation !== incarnation.incarnation) {
            return yield* new ExecutionNotFound({ workflow: named.workflow, executionId: named.executionId })
          }
          if (execution.status === "complete") {
            return yield* new ExecutionComplete({ workflow: named.workflow, executionId: named.executionId })
          }
          // The engine's own write (first write wins, the execution woken in this transaction),
          // as a deferred completed from another process than the run's.
          const recorded = yield* store.recordStep(
            named.workflow,
            named.executionId,
            "deferred",
            named.deferred,
            0,
            encodedExit
          )
          if (recorded.inserted) return "completed" as const
          return sameExit(recorded.result) ? "already-completed" as const : yield* conflict
        })
        const handled = yield* inbox.handle(CONSUMER, receipt, body).pipe(
          Effect.provideService(SqlClient.SqlClient, sql)
        )
        // Committed (or joined the caller's transaction): a run of this process parked on it replays now.
        const preempt = Preemption.lookup(sql)
        if (handled._tag === "Processed" && handled.value === "completed" && preempt !== undefined) {
          yield* preempt(named.executionId, named.deferred)
        }
        return { outcome: handled._tag === "Duplicate" ? "already-completed" : handled.value, ...named }
      })

    return { complete }
  })

/** Completions by token, as a service (a broker's consumer, a job of your own, the HTTP endpoint). */
export class DeferredCompleter extends Context.Service<DeferredCompleter, {
  readonly complete: (completion: Completion) => Effect.Effect<Completed, CompleteError>
}>()("@effect-durable/workflow/DeferredCompleter") {}

/** `DeferredCompleter` over `deferreds`. */
export const layer = (
  deferreds: ReadonlyArray<DurableDeferred.AnyWithProps>
): Layer.Layer<DeferredCompleter, InvalidInput, Requirements> =>
  Layer.effect(DeferredCompleter, Effect.map(make(deferreds), DeferredCompleter.of))
