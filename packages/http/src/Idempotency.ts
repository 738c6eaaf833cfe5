/**
 * Idempotency-Key (draft-ietf-httpapi-idempotency-key-header-07) for `@effect/platform`
 * services, on the effect-durable mutation ledger: the handler runs inside the ledger's
 * transaction, so its writes, its outbox messages and the stored response commit together
 * or not at all, and an exact retry gets the stored response back, byte for byte.
 *
 * - `middleware(api)`: an `HttpLayerRouter` route middleware for an `HttpApi`; endpoints opt
 *   in with `endpoint({ required })`, handlers say when they begin with `executing`.
 * - `wrapper()`: the same for plain `HttpRouter` / `HttpLayerRouter` route handlers.
 *
 * A record's identity is (subject, method + route pattern, key); the request fingerprint
 * covers the method, the path with its query and the body. See the package README for every
 * rule and the choices made where the draft leaves one open.
 *
 * @since 0.1.0
 */
import type { DurableConfigError } from "@effect-durable/core/Errors"
import type * as MutationLedger from "@effect-durable/pg/MutationLedger"
import type * as HttpApi from "effect/http-api/HttpApi"
import * as Headers from "effect/http/Headers"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import type * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpRouter from "effect/http/HttpRouter"
import type { HttpMethod } from "effect/http/HttpMethod"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import type * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as OpenApi from "effect/http-api/OpenApi"
import type * as SqlClient from "effect/sql/SqlClient"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import * as Endpoints from "./internal/endpoints.js"
import * as Execution from "./internal/execution.js"
import * as IdempotentRequest from "./internal/idempotentRequest.js"
import * as Options_ from "./internal/options.js"
import * as Problem from "./Problem.js"
import type { Subject } from "./Subject.js"

export interface Options {
  /** The header that carries the key. Default `Idempotency-Key`. */
  readonly header?: string
  /** Fewest characters in a key. Default 1. */
  readonly minKeyLength?: number
  /** Most characters in a key, at most 255. Default 255. */
  readonly maxKeyLength?: number
  /** Methods whose requests go through the ledger; others ignore the key. Default POST and PATCH. */
  readonly methods?: ReadonlyArray<"POST" | "PATCH" | "PUT" | "DELETE">
  /** Largest request body read for a request with a key; a larger one is 413. Default 1 MiB. */
  readonly maxRequestBytes?: number
  /** Largest response stored, at most 4 MiB; a larger one is rolled back and answered 500. Default 1 MiB. */
  readonly maxResponseBytes?: number
  /** Response headers stored and replayed with the body. Never Set-Cookie, Date or Content-Length. */
  readonly storedHeaders?: ReadonlyArray<string>
  /** The header set on replays (`true`), never on a first response. Default `Idempotent-Replayed`. */
  readonly replayHeader?: string
  /** A request whose key is in flight: `conflict` (default) answers 409 at once, `wait` waits for the first one (bounded by the lock timeout, then 409). */
  readonly inFlight?: "conflict" | "wait"
  /** `Retry-After` seconds on a 409 or 503. Default 1. */
  readonly retryAfterSeconds?: number
  /** Base of the problem `type` URIs (`<base><code>`); point it at your documentation. */
  readonly problemTypeBase?: string
}

/** The defaults of `Options`. */
export const Defaults = Options_.Defaults

/** An endpoint's part in idempotency, as its annotation holds it. */
export interface IdempotentEndpoint {
  /** `true`: a request without the key is refused with 400. `false`: it runs without the ledger. */
  readonly required: boolean
}

/** The endpoint annotation `middleware` reads (`endpoint(...)` sets it, with the OpenAPI documentation). */
export class Idempotent extends Context.Service<Idempotent, IdempotentEndpoint>()("@effect-durable/http/Idempotent") {}

/**
 * Marks an `HttpApiEndpoint` idempotent and documents it: the key header parameter and the
 * problems the middleware may answer with (400, 409, 413, 415, 422). Use it with `.pipe`.
 */
export const endpoint = (options: IdempotentEndpoint & { readonly header?: string }) =>
<
  Name extends string,
  Method extends HttpMethod,
  Path,
  UrlParams,
  Payload,
  Headers,
  Success,
  Error,
  R,
  RE
>(
  self: HttpApiEndpoint.HttpApiEndpoint<Name, Method, Path, UrlParams, Payload, Headers, Success, Error, R, RE>
) => {
  const header = {
    name: options.header ?? Defaults.header,
    in: "header",
    required: options.required,
    description: "Makes a retry of this request safe: the same key with the same request replays the first response.",
    schema: { type: "string", minLength: 1, maxLength: Defaults.maxKeyLength }
  }
  return self.annotate(Idempotent, { required: options.required }).annotate(
    OpenApi.Transform,
    (operation) => ({ ...operation, parameters: [...(operation.parameters ?? []), header] })
  ).addError(Problem.schema("keyMissing"))
    .addError(Problem.schema("keyInvalid"))
    .addError(Problem.schema("keyInFlight"))
    .addError(Problem.schema("bodyTooLarge"))
    .addError(Problem.schema("bodyUnsupported"))
    .addError(Problem.schema("keyReused"))
}

/**
 * Wraps an HttpApi handler so that it marks where execution begins: after the path, query,
 * headers and payload decoded and the API's security accepted the request. Responses given
 * before it (those refusals) are never stored; what the handler answers after it, a typed
 * 4xx included, is. `handlers.handle("create", Idempotency.executing(({ payload }) => ...))`.
 */
export const executing = <Args extends ReadonlyArray<unknown>, A, E, R>(
  handler: (...args: Args) => Effect.Effect<A, E, R>
) =>
(...args: Args): Effect.Effect<A, E, R> => Effect.andThen(Execution.begin, Effect.suspend(() => handler(...args)))

/**
 * Keys are request data: the platform's server span records every request header not named
 * in `Headers.currentRedactedNames`, so the key's header is added to it for the server the
 * middleware is built into (the server's runtime is built after its routes).
 */
const redactKeyHeader = (header: string) =>
  FiberRef.update(Headers.currentRedactedNames, (names) => names.includes(header) ? names : [...names, header])

/**
 * The route middleware for an `HttpApi` served with `HttpRouter.addHttpApi`. It needs
 * the request's `Subject`: combine it with the middleware that provides one, which then runs
 * first — `Idempotency.middleware(Api).combine(Subject.identify(verify)).layer`.
 */
export const middleware = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  api: HttpApi.HttpApi<Id, Groups, E, R>,
  options: Options = {}
): HttpRouter.Middleware<{
  provides: never
  handles: never
  error: never
  requires: Subject
  layerError: DurableConfigError
  layerRequires: SqlClient.SqlClient | MutationLedger.MutationLedger
}> =>
  HttpRouter.middleware(Effect.gen(function*() {
    const settings = yield* Options_.decode(options)
    yield* redactKeyHeader(settings.header)
    const endpoints = yield* Endpoints.fromApi(api, Idempotent, settings)
    const run = yield* IdempotentRequest.make(settings)
    return (httpEffect) =>
      Effect.flatMap(HttpRouter.RouteContext, ({ route }) => {
        const found = endpoints.get(`${route.method} ${route.path}`)
        return found === undefined ? httpEffect : run(found, route.path, "marked", httpEffect)
      })
  }))

/** Wraps plain handlers; `required` and `optional` say whether the key must be sent. */
export interface Wrapper {
  readonly required: <E, R>(
    handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>,
    options?: WrapOptions
  ) => Effect.Effect<HttpServerResponse.HttpServerResponse, E, R | Subject | HttpServerRequest.HttpServerRequest>
  readonly optional: Wrapper["required"]
}

export interface WrapOptions {
  /**
   * The route pattern that names the operation (with the method), e.g. `/transfers/:id`.
   * Default: the pattern of the router route the handler runs in (`RouteContext`); a handler
   * outside a router (a whole `HttpApp`) must give it.
   */
  readonly route?: string
}

/**
 * For plain handlers: `HttpRouter.post(path, wrapper.required(handler))`, `HttpRouter.route`,
 * or a whole `HttpApp` with `{ route }`. Execution begins when the handler is called: every
 * response it gives below 500 is stored; validate by failing (`HttpServerRequest.schemaBodyJson`),
 * not by answering 400, to keep a refusal from being stored. The request needs a `Subject`.
 */
export const wrapper = (
  options: Options = {}
): Effect.Effect<Wrapper, DurableConfigError, SqlClient.SqlClient | MutationLedger.MutationLedger> =>
  Effect.gen(function*() {
    const settings = yield* Options_.decode(options)
    yield* redactKeyHeader(settings.header)
    const run = yield* IdempotentRequest.make(settings)
    const routeOf = (wrap: WrapOptions) =>
      wrap.route !== undefined ? Effect.succeed(wrap.route) : Effect.flatMap(
        Effect.serviceOption(HttpRouter.RouteContext),
        Option.match({
          onSome: ({ route }) => Effect.succeed(route.path),
          onNone: () => Effect.dieMessage("Idempotency.wrapper: a handler outside a router route needs { route }")
        })
      )
    const wrap = (required: boolean) =>
    <E, R>(handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>, wrapOptions: WrapOptions = {}) =>
      Effect.flatMap(routeOf(wrapOptions), (route) => run({ required }, route, "entry", handler))
    return { required: wrap(true), optional: wrap(false) }
  })
