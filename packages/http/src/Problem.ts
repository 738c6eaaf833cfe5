/**
 * The answers the idempotency middleware gives itself, as RFC 9457 problem details
 * (`application/problem+json`): a stable `type` URI and `code` per problem, a `title`, the
 * `status` and a `detail` that never repeats the client's key or body. None of them is ever
 * stored in the ledger. The same shapes as `Schema`s, to document them in an `HttpApi`.
 *
 * @since 0.1.0
 */
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Schema from "effect/Schema"

/** Every problem the middleware answers with: its status, code and title. */
export const Problems = {
  keyMissing: { status: 400, code: "idempotency-key-missing", title: "Idempotency-Key is missing" },
  keyInvalid: { status: 400, code: "idempotency-key-invalid", title: "Idempotency-Key is not a valid key" },
  keyUnsupported: {
    status: 400,
    code: "idempotency-key-unsupported",
    title: "This endpoint is not idempotent: it does not take an Idempotency-Key"
  },
  unauthenticated: { status: 401, code: "unauthenticated", title: "Authentication is required to use Idempotency-Key" },
  keyInFlight: {
    status: 409,
    code: "idempotency-key-in-flight",
    title: "A request is outstanding for this Idempotency-Key"
  },
  bodyTooLarge: { status: 413, code: "request-body-too-large", title: "The request body is too large" },
  bodyTooDeep: { status: 400, code: "request-body-too-deep", title: "The JSON request body is nested too deeply" },
  bodyUnsupported: {
    status: 415,
    code: "request-body-unsupported",
    title: "Multipart bodies are not accepted with an Idempotency-Key"
  },
  keyReused: {
    status: 422,
    code: "idempotency-key-reused",
    title: "Idempotency-Key is already used for a different request"
  },
  responseNotStorable: {
    status: 500,
    code: "response-not-storable",
    title: "The response could not be stored; nothing was done"
  },
  databaseUnavailable: {
    status: 503,
    code: "database-unavailable",
    title: "The request could not be completed; nothing was done"
  },
  databaseError: { status: 500, code: "database-error", title: "The request failed; nothing was done" }
} as const

export type ProblemName = keyof typeof Problems

/** The default base of `type` URIs: `<base><code>`. Set `problemTypeBase` to your API's documentation. */
export const DEFAULT_TYPE_BASE = "https://effect-durable.invalid/problems/"

export interface Problem {
  readonly type: string
  readonly title: string
  readonly status: number
  readonly detail: string
  readonly code: string
}

/** A problem response. `headers` adds `Retry-After`, `Connection: close`... */
export const response = (
  problem: Problem,
  headers: Readonly<Record<string, string>> = {}
): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.jsonUnsafe(problem, {
    status: problem.status,
    contentType: "application/problem+json",
    headers: { "content-language": "en", ...headers }
  })

/** The problem `name` with `detail`, its `type` under `typeBase`. */
export const make = (name: ProblemName, detail: string, typeBase: string = DEFAULT_TYPE_BASE): Problem => {
  const { code, status, title } = Problems[name]
  return { type: `${typeBase}${code}`, title, status, detail, code }
}

/**
 * A problem document as a `Schema`, for OpenAPI and typed clients (the `Idempotency`
 * middleware declares these as its errors); never produced by a handler.
 */
export const schema = <Name extends ProblemName>(name: Name) => {
  type Entry = (typeof Problems)[Name]
  const status: Entry["status"] = Problems[name].status
  const code: Entry["code"] = Problems[name].code
  const title = Problems[name].title
  const identifier = code.replace(/(^|-)([a-z])/g, (_, __, letter: string) => letter.toUpperCase())
  return Schema.Struct({
    type: Schema.String,
    title: Schema.String,
    status: Schema.Literal(status),
    detail: Schema.String,
    code: Schema.Literal(code)
  }).pipe(
    HttpApiSchema.asJson({ contentType: "application/problem+json" }),
    HttpApiSchema.status(status)
  ).annotate({ identifier, description: title })
}
