/**
 * Completing a workflow's deferred from outside: a payment provider's callback, an approval
 * link's form. The caller holds a signed deferred token (`DeferredTokens.sign`) and posts it
 * with the value (or the error) the deferred waits for:
 *
 * ```http
 * POST /workflow/deferred
 * content-type: application/json
 *
 * { "token": "<signed>", "value": "auth-77" }        (or "error": …)
 * ```
 *
 * What happens, in one transaction: the delivery's receipt is taken in the inbox (consumer
 * `workflow.deferred`, keyed by the deferred and the exit it carries), the value is decoded
 * with the deferred's own schema and written to the engine's journal as the engine writes a
 * deferred completed in another process (first write wins, the execution woken). A repeated callback is recognized and answered as it was
 * (`already-completed`); a different value for a deferred that already has one is refused
 * (409), as is a token for a complete or unknown execution, a token that does not open (403)
 * and a body that is too large, too deep, not JSON or not of the deferred's schema (413, 400).
 * Refusals write nothing. `complete` is the same, typed, without HTTP (a broker's consumer).
 *
 * @since 0.2.0
 */
import { type DatabaseError, type DurableConfigError, InvalidInput } from "@effect-durable/core/Errors"
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import * as Input from "@effect-durable/core/Input"
import * as Options from "@effect-durable/core/Options"
import * as Problem from "@effect-durable/http/Problem"
import * as RequestBody from "@effect-durable/http/RequestBody"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Inbox from "@effect-durable/pg/Inbox"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
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

/** The inbox consumer the endpoint's receipts are kept under. */
export const CONSUMER = "workflow.deferred"

/** The deferred is not one this endpoint completes (not in its `deferreds`). */
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

type Requirements = DeferredTokens | Inbox.Inbox | SqlClient.SqlClient | DurableSettings | Outbox.Outbox

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
 * A completer over `deferreds` (each named once). `complete` decodes the value with the
 * deferred's schema and completes it through the engine in a transaction of its own (or the
 * caller's), its receipt in the inbox.
 */
export const makeCompleter = (deferreds: ReadonlyArray<DurableDeferred.AnyWithProps>) =>
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
    const store = Store.make(sql, yield* DurableSettings, yield* Outbox.Outbox)

    const complete = (completion: Completion): Effect.Effect<Completed, CompleteError> =>
      Effect.gen(function*() {
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
        const decoded = yield* Schema.decodeUnknownEffect(schema)(failed ? completion.error : completion.value).pipe(
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

/** The endpoint's completions without HTTP (a broker's consumer, a job of your own). */
export class DeferredCompleter extends Context.Service<DeferredCompleter, {
  readonly complete: (completion: Completion) => Effect.Effect<Completed, CompleteError>
}>()("@effect-durable/workflow/DeferredCompleter") {}

/** `DeferredCompleter` over `deferreds`. */
export const layerCompleter = (
  deferreds: ReadonlyArray<DurableDeferred.AnyWithProps>
): Layer.Layer<DeferredCompleter, InvalidInput, Requirements> =>
  Layer.effect(DeferredCompleter, Effect.map(makeCompleter(deferreds), DeferredCompleter.of))

/** The endpoint's options, each declared once. */
export const DeferredEndpointOptionsTable = Options.declare({
  path: Options.option({
    schema: Schema.String.check(Schema.isPattern(/^(\/[A-Za-z0-9._~-]+)+$/, {
      message: "a path such as /workflow/deferred (segments of unreserved URL characters)"
    })),
    default: "/workflow/deferred",
    purpose: "where the endpoint takes its POSTs",
    example: "/workflow/deferred"
  }),
  maxBodyBytes: Options.option({
    schema: Input.Count(16 * 1024 * 1024),
    default: 64 * 1024,
    purpose: "largest request body in bytes (a larger one is answered 413)",
    example: "65536"
  }),
  maxDepth: Options.option({
    schema: Input.Count(256),
    default: 32,
    purpose: "deepest JSON nesting of a request body",
    example: "32"
  })
})

export interface DeferredEndpointOptions {
  /** The deferreds it completes; their schemas decode the posted value or error. */
  readonly deferreds: ReadonlyArray<DurableDeferred.AnyWithProps>
  /** Where it takes POSTs. Default `/workflow/deferred`. */
  readonly path?: string
  /** Largest body in bytes. Default 64 KiB, at most 16 MiB. */
  readonly maxBodyBytes?: number
  /** Deepest JSON nesting. Default 32, at most 256. */
  readonly maxDepth?: number
  /** The base of the problems' `type` URIs. Default `Problem.DEFAULT_TYPE_BASE`. */
  readonly problemTypeBase?: string
}

/** Every answer the endpoint refuses with: its status, code and title. */
export const Problems = {
  requestInvalid: { status: 400, code: "deferred-request-invalid", title: "The request is not a deferred completion" },
  valueInvalid: { status: 400, code: "deferred-value-invalid", title: "The value does not match the deferred" },
  tokenInvalid: { status: 403, code: "deferred-token-invalid", title: "The deferred token is not valid" },
  unknownDeferred: { status: 404, code: "deferred-unknown", title: "This endpoint does not complete that deferred" },
  executionNotFound: {
    status: 404,
    code: "workflow-execution-not-found",
    title: "The workflow execution does not exist"
  },
  executionComplete: { status: 409, code: "workflow-execution-complete", title: "The workflow execution is complete" },
  alreadyCompleted: {
    status: 409,
    code: "deferred-already-completed",
    title: "The deferred was already completed with another value"
  },
  bodyTooLarge: Problem.Problems.bodyTooLarge,
  bodyTooDeep: Problem.Problems.bodyTooDeep,
  bodyNotJson: { status: 400, code: "request-body-not-json", title: "The request body is not JSON" },
  databaseUnavailable: Problem.Problems.databaseUnavailable,
  databaseError: Problem.Problems.databaseError
} as const

const Request = Schema.Struct({
  token: Schema.String,
  value: Schema.optionalKey(Schema.Unknown),
  error: Schema.optionalKey(Schema.Unknown)
})
const decodeRequest = Schema.decodeUnknownResult(Request)

/**
 * The endpoint's route, for your `HttpRouter` (next to your own routes, behind your own
 * middleware if you want one: the token is the credential). Needs `DeferredTokens`, the
 * substrate (`Durable.layer`) and the engine.
 */
export const layer = (
  options: DeferredEndpointOptions
): Layer.Layer<never, DurableConfigError | InvalidInput, HttpRouter.HttpRouter | Requirements> =>
  HttpRouter.addAll(Effect.gen(function*() {
    const { deferreds, problemTypeBase = Problem.DEFAULT_TYPE_BASE, ...checked } = options
    const decoded = yield* DeferredEndpointOptionsTable.decode(checked)
    const { complete } = yield* makeCompleter(deferreds)
    const problem = (name: keyof typeof Problems, detail: string) => {
      const { code, status, title } = Problems[name]
      return Problem.response({ type: `${problemTypeBase}${code}`, title, status, detail, code })
    }
    const handler = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const body = yield* RequestBody.json(request, { maxBytes: decoded.maxBodyBytes, maxDepth: decoded.maxDepth })
      const parsed = decodeRequest(body)
      if (Result.isFailure(parsed)) {
        return problem("requestInvalid", "expected a JSON object with a string token and a value or an error")
      }
      if (parsed.success.value !== undefined && parsed.success.error !== undefined) {
        return problem("requestInvalid", "give either a value or an error, not both")
      }
      const done = yield* complete(parsed.success)
      return HttpServerResponse.jsonUnsafe(done, { status: 200 })
    }).pipe(
      // A request whose body broke off: the client is gone, nobody reads the answer.
      Effect.catchTag("HttpServerError", () => Effect.succeed(HttpServerResponse.empty({ status: 400 }))),
      Effect.catchTags({
        BodyRefused: (error) =>
          Effect.succeed(
            problem(
              error.rule === "too-large" ? "bodyTooLarge" : error.rule === "too-deep" ? "bodyTooDeep" : "bodyNotJson",
              error.detail
            )
          ),
        InvalidDeferredToken: (error) => Effect.succeed(problem("tokenInvalid", error.reason)),
        UnknownDeferred: (error) => Effect.succeed(problem("unknownDeferred", error.message)),
        InvalidDeferredValue: (error) => Effect.succeed(problem("valueInvalid", error.message)),
        ExecutionNotFound: (error) => Effect.succeed(problem("executionNotFound", error.message)),
        ExecutionComplete: (error) => Effect.succeed(problem("executionComplete", error.message)),
        DeferredAlreadyCompleted: (error) => Effect.succeed(problem("alreadyCompleted", error.message)),
        InvalidInput: (error) => Effect.succeed(problem("requestInvalid", error.message)),
        DatabaseError: (error) =>
          Effect.succeed(
            error.retryable
              ? problem("databaseUnavailable", "the database is unavailable; retry later")
              : problem("databaseError", "the database refused the completion")
          )
      })
    )
    return [HttpRouter.route("POST", decoded.path as HttpRouter.PathInput, handler)]
  }))
