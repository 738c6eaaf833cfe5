/**
 * The idempotent endpoints of an `HttpApi` (those with the `Idempotency` middleware), checked
 * once when the middleware's layer is built, and each endpoint's part in idempotency.
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import * as ByteSize from "effect/ByteSize"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as HttpApi from "effect/http-api/HttpApi"
import type * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import type * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import type * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpMethod from "effect/http/HttpMethod"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import type { Settings } from "./options.js"

/** The ledger names an operation in at most 128 bytes. */
const MAX_OPERATION_BYTES = 128

/** What an endpoint's annotation says; an endpoint with the middleware but no annotation requires the key. */
export interface Part {
  readonly required: boolean
  /** Not idempotent: a request with the key is refused (400), one without it runs as it is. */
  readonly refuseKey?: boolean
}

/** The annotation's value on an endpoint (merged over its group's and API's), or the default. */
export const partOf = (
  annotation: Context.Key<any, Part>,
  annotations: Context.Context<never>
): Part => Context.getOrUndefined(annotations, annotation) ?? { required: true }

/** The marker `Idempotency.notIdempotent()` sets on an endpoint, beside its `Idempotent` part. */
export class RefusingKey extends Context.Service<RefusingKey, boolean>()("@effect-durable/http/RefusingKey") {}
const refusingKey = RefusingKey

/** Why an endpoint cannot be idempotent with these settings, if it cannot. */
export const refusal = (
  group: HttpApiGroup.Top,
  endpoint: HttpApiEndpoint.Top,
  settings: Settings
): DurableConfigError | undefined => {
  const operation = `${endpoint.method} ${endpoint.path}`
  const field = `${group.identifier}.${endpoint.identifier}`
  // An endpoint that refuses the key takes any method: it never reaches the ledger.
  if (Context.getOrUndefined(endpoint.annotations, refusingKey) === true) return undefined
  if (!settings.methods.has(endpoint.method)) {
    return new DurableConfigError({
      field,
      rule: `idempotent endpoints use ${
        [...settings.methods].join(", ")
      } (the methods option); ${operation} would ignore its key`
    })
  }
  if (Buffer.byteLength(operation, "utf8") > MAX_OPERATION_BYTES) {
    return new DurableConfigError({ field, rule: `method and route pattern in at most ${MAX_OPERATION_BYTES} bytes` })
  }
  return undefined
}

/** Fails with the first endpoint of `api` that carries `middleware` and cannot be idempotent. */
export const check = <Id extends string, Groups extends HttpApiGroup.Constraint>(
  api: HttpApi.HttpApi<Id, Groups>,
  middleware: Context.Key<any, any>,
  settings: Settings
): Effect.Effect<void, DurableConfigError> =>
  Effect.suspend(() => {
    let refused: DurableConfigError | undefined
    HttpApi.reflect(api, {
      onGroup: () => {},
      onEndpoint: ({ endpoint, group, middleware: middlewares }) => {
        if (refused === undefined && middlewares.has(middleware as HttpApiMiddleware.AnyService)) {
          refused = refusal(group, endpoint, settings)
        }
      }
    })
    return refused === undefined ? Effect.void : Effect.fail(refused)
  })

/** `text/plain; charset=UTF-8` is `text/plain`, as HttpApi matches payload encodings. */
const mediaType = (contentType: string) => contentType.toLowerCase().split(";")[0]!.trim()

/**
 * The answers HttpApi gives a request before its handler runs that are responses, not
 * failures: a Content-Type the endpoint has no payload for (415), and a declared length over
 * a streaming payload's `maxBytes` (413). The middleware gives them itself, the same, so that
 * they are never stored as the handler's. `undefined`: HttpApi decodes the request (a decoding
 * failure arrives as `HttpApiSchemaError`). A raw handler (`handleRaw`) gets the 415 too.
 */
export const answerBeforeHandler = (
  endpoint: HttpApiEndpoint.Top
): (request: HttpServerRequest.HttpServerRequest) => HttpServerResponse.HttpServerResponse | undefined => {
  if (endpoint.payload.size === 0) return () => undefined
  return (request) => {
    if (!HttpMethod.hasBody(request.method)) return undefined
    const contentType = mediaType(request.headers["content-type"] ?? "application/json")
    const payload = endpoint.payload.get(contentType)
    if (payload === undefined) {
      return HttpServerResponse.text(`Unsupported content-type: ${contentType}`, { status: 415 })
    }
    if (payload.encoding._tag !== "Stream") return undefined
    const maxBytes = (payload.schemas[0] as { readonly maxBytes?: ByteSize.ByteSize | undefined }).maxBytes
    return maxBytes !== undefined && Number(request.headers["content-length"]) > ByteSize.toNumberUnsafe(maxBytes)
      ? HttpServerResponse.empty({ status: 413, headers: { connection: "close" } })
      : undefined
  }
}

/**
 * Whether HttpApi decodes the request's body as JSON: its Content-Type (JSON when it has
 * none, as HttpApi reads it) is one the endpoint has a JSON payload for.
 */
export const parsesJson = (
  endpoint: HttpApiEndpoint.Top
): (request: HttpServerRequest.HttpServerRequest) => boolean => {
  if (endpoint.payload.size === 0) return () => false
  return (request) =>
    HttpMethod.hasBody(request.method) &&
    endpoint.payload.get(mediaType(request.headers["content-type"] ?? "application/json"))?.encoding._tag === "Json"
}
