/**
 * Completing a workflow's deferred over HTTP: a payment provider's callback, an approval link's
 * form. The caller holds a signed deferred token (`DeferredTokens.sign`) and posts it with the
 * value (or the error) the deferred waits for:
 *
 * ```http
 * POST /workflow/deferred
 * content-type: application/json
 *
 * { "token": "<signed>", "value": "auth-77" }        (or "error": …)
 * ```
 *
 * The completion is `@effect-durable/workflow`'s `DeferredCompleter` (one transaction: the
 * receipt in the inbox, the value decoded with the deferred's own schema and journaled as the
 * engine writes it, the execution woken). A repeated callback is answered as it was (200,
 * `already-completed`); a different value for a deferred that already has one is refused (409),
 * as is a token for a complete or unknown execution (409, 404), a token that does not open
 * (403), a deferred the endpoint does not serve (404) and a body that is too large, too deep, not
 * JSON or not of the deferred's schema (413, 400), each as an RFC 9457 problem. Refusals write
 * nothing.
 *
 * Its own package so that the workflow engine installs without the HTTP stack.
 *
 * @since 0.2.0
 */
import type { DurableConfigError, InvalidInput } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Options from "@effect-durable/core/Options"
import * as Problem from "@effect-durable/http/Problem"
import * as RequestBody from "@effect-durable/http/RequestBody"
import * as DeferredCompleter from "@effect-durable/workflow/DeferredCompleter"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import type * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type * as DurableDeferred from "effect/workflow/DurableDeferred"

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
): Layer.Layer<never, DurableConfigError | InvalidInput, HttpRouter.HttpRouter | DeferredCompleter.Requirements> =>
  HttpRouter.addAll(Effect.gen(function*() {
    const { deferreds, problemTypeBase = Problem.DEFAULT_TYPE_BASE, ...checked } = options
    const decoded = yield* DeferredEndpointOptionsTable.decode(checked)
    const { complete } = yield* DeferredCompleter.make(deferreds)
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
