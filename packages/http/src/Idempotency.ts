/**
 * Idempotency-Key (draft-ietf-httpapi-idempotency-key-header-07) for `effect/http` and
 * `effect/http-api` services, on the effect-durable mutation ledger: the handler runs inside
 * the ledger's transaction, so its writes, its outbox messages and the stored response
 * commit together or not at all, and an exact retry gets the stored response back, byte for
 * byte.
 *
 * - `Idempotency`: an `HttpApiMiddleware`. Endpoints opt in with `.middleware(Idempotency)`
 *   (or `Idempotency.endpoint({ required })`, which also documents the key); `layer(api)`
 *   implements it. It wraps the endpoint's decoding, handler and encoding, and requires the
 *   request's `Subject` from a middleware around it (your API's security middleware).
 * - `wrapper()`: the same for plain `HttpRouter` route handlers and whole `HttpEffect`s.
 * - `layerRedactKeyHeader()`: keeps the key out of the server's spans; provide it to the server.
 *
 * A record's identity is (subject, method + route pattern, key); the request fingerprint
 * covers the method, the path with its query and the body. See the package README for every
 * rule and the choices made where the draft leaves one open.
 *
 * @since 0.1.0
 */
import type { DurableConfigError } from "@effect-durable/core/Errors"
import type * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as HttpApi from "effect/http-api/HttpApi"
import type * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import { HttpApiPayloadTooLarge, HttpApiSchemaError } from "effect/http-api/HttpApiError"
import type * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as OpenApi from "effect/http-api/OpenApi"
import * as Headers from "effect/http/Headers"
import * as HttpRouter from "effect/http/HttpRouter"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import type * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as SqlClient from "effect/sql/SqlClient"
import * as Endpoints from "./internal/endpoints.js"
import * as ErrorResponse from "./internal/errorResponse.js"
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
  /**
   * Deepest nesting of arrays and objects in a JSON body, at most 512; a deeper one is 400
   * `request-body-too-deep` before the handler (a recursive schema would overflow the stack
   * decoding it). Default 64.
   */
  readonly maxJsonDepth?: number
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

/**
 * The endpoint annotation the middleware reads (`endpoint(...)` sets it). An endpoint with the
 * middleware and without the annotation requires the key.
 */
export class Idempotent extends Context.Service<Idempotent, IdempotentEndpoint>()("@effect-durable/http/Idempotent") {}

/**
 * The Idempotency-Key middleware of an `HttpApi`: `.middleware(Idempotency)` on an endpoint
 * (POST or PATCH unless `methods` says otherwise), implemented by `layer(api, options)`.
 *
 * It wraps the endpoint's execution (decoding, handler, encoding) in the ledger's
 * transaction, and is itself wrapped by the middlewares added after it — the endpoint's
 * later ones, its group's and its API's — which run first: your security middleware (a
 * refused credential never reaches the ledger) provides the `Subject` it requires (or
 * `Subject.Identify` does). Middlewares added to the endpoint before it run inside it, in
 * the transaction, and what they answer is stored.
 *
 * What is stored: the handler's response, and its typed errors declared on the endpoint (as
 * the very response HttpApi encodes for them), when below 500. Never a request that does not
 * decode (`HttpApiSchemaError`), an error declared only by a middleware, a 5xx or a defect:
 * those roll back. The errors it declares are the problems it answers itself, so that the
 * OpenAPI document and typed clients know them.
 */
export class Idempotency extends HttpApiMiddleware.Service<Idempotency, { requires: Subject }>()(
  "@effect-durable/http/Idempotency",
  {
    error: [
      Problem.schema("keyMissing"),
      Problem.schema("keyInvalid"),
      Problem.schema("keyUnsupported"),
      Problem.schema("bodyTooDeep"),
      Problem.schema("keyInFlight"),
      Problem.schema("bodyTooLarge"),
      Problem.schema("bodyUnsupported"),
      Problem.schema("keyReused")
    ]
  }
) {}

/**
 * Adds the `Idempotency` middleware to an `HttpApiEndpoint` and documents it: `required`
 * says whether a request without the key is refused (400) or runs without the ledger; the
 * key's header becomes a parameter of the operation in the OpenAPI document. Use it with
 * `.pipe`, before the middlewares that must wrap it.
 */
export const endpoint =
  (options: IdempotentEndpoint & { readonly header?: string }) =>
  <Endpoint extends HttpApiEndpoint.Constraint>(
    self: Endpoint
  ): HttpApiEndpoint.AddMiddleware<Endpoint, Idempotency> => {
    const header = {
      name: options.header ?? Defaults.header,
      in: "header",
      required: options.required,
      description: "Makes a retry of this request safe: the same key with the same request replays the first response.",
      schema: { type: "string", minLength: 1, maxLength: Defaults.maxKeyLength }
    }
    return (self as unknown as HttpApiEndpoint.Top)
      .middleware(Idempotency)
      .annotate(Idempotent, { required: options.required })
      .annotate(
        OpenApi.Transform,
        (operation) => ({ ...operation, parameters: [...(operation.parameters ?? []), header] })
      ) as any
  }

/**
 * Marks an endpoint that is not idempotent: a request that carries the key is refused with
 * 400 `idempotency-key-unsupported` before the handler runs, so a client that retries it with
 * a key learns that the retry would run again; a request without the key runs as it is. An
 * endpoint without the middleware ignores the key, as HTTP does: a keyed PATCH there runs
 * again on every retry. Any method; the key's header is not documented for it.
 */
export const notIdempotent =
  () =>
  <Endpoint extends HttpApiEndpoint.Constraint>(self: Endpoint): HttpApiEndpoint.AddMiddleware<Endpoint, Idempotency> =>
    (self as unknown as HttpApiEndpoint.Top)
      .middleware(Idempotency)
      .annotate(Idempotent, { required: false })
      .annotate(Endpoints.RefusingKey, true) as any

/**
 * The `Idempotency` middleware for the endpoints of `api` that have it. Options are decoded,
 * and every such endpoint checked (a method outside `methods`, a route pattern beyond the
 * ledger's bounds), when the layer is built: a `DurableConfigError` names what is wrong.
 * Provide it to `HttpApiBuilder.layer(api)`, with the middleware that provides `Subject`.
 */
export const layer = <Id extends string, Groups extends HttpApiGroup.Constraint>(
  api: HttpApi.HttpApi<Id, Groups>,
  options: Options = {}
): Layer.Layer<Idempotency, DurableConfigError, SqlClient.SqlClient | MutationLedger.MutationLedger> =>
  Layer.effect(
    Idempotency,
    Effect.gen(function*() {
      const settings = yield* Options_.decode(options)
      yield* Endpoints.check(api, Idempotency, settings)
      const run = yield* IdempotentRequest.make(settings)
      const groups = Object.values(api.groups) as ReadonlyArray<HttpApiGroup.Top>
      // Called once per endpoint, when HttpApiBuilder builds its route.
      return Idempotency.of((httpEffect, { endpoint, group }) => {
        const refused = Endpoints.refusal(group, endpoint, settings)
        // An endpoint of another API than the layer's: refused as it would have been there.
        if (refused !== undefined) throw refused
        const apiAnnotations = groups.includes(group) ? api.annotations : Context.empty()
        const annotations = Context.merge(Context.merge(apiAnnotations, group.annotations), endpoint.annotations)
        const route: IdempotentRequest.Route = {
          required: Endpoints.partOf(Idempotent, annotations).required,
          refuseKey: Context.getOrUndefined(endpoint.annotations, Endpoints.RefusingKey) === true,
          answerBeforeHandler: Endpoints.answerBeforeHandler(endpoint),
          parsesJson: Endpoints.parsesJson(endpoint)
        }
        const encode = ErrorResponse.encoder(group, endpoint, apiAnnotations)
        // A typed error the endpoint declares is its answer: its response is stored (below 500).
        // A request that does not decode, or anything else, fails on and rolls back.
        const handler = Effect.catch(httpEffect, (error) =>
          HttpApiSchemaError.is(error) || HttpApiPayloadTooLarge.is(error)
            ? Effect.fail(error)
            : Effect.flatMap(
              encode(error),
              (response) =>
                response !== undefined && response.status < 500 ? Effect.succeed(response) : Effect.fail(error)
            ))
        return Effect.flatMap(HttpRouter.RouteContext, (context) =>
          run(route, context.route.path, handler))
      })
    })
  )

/**
 * Keeps the key out of the server's spans and logs: adds its header to
 * `Headers.CurrentRedactedNames` (the server span records a captured header listed there as
 * `<redacted>`, and so does a logged `Headers`). A server reads it from its own context, so
 * provide this to the server: `HttpRouter.serve(routes).pipe(Layer.provide(
 * Idempotency.layerRedactKeyHeader(options)), Layer.provide(NodeHttpServer.layer(...)))`.
 * Give it the `header` option the middleware has.
 */
export const layerRedactKeyHeader = (options: Pick<Options, "header"> = {}): Layer.Layer<never> =>
  Layer.effect(
    Headers.CurrentRedactedNames,
    Effect.map(Headers.CurrentRedactedNames, (names) => {
      const header = (options.header ?? Defaults.header).toLowerCase()
      return names.some((name) => typeof name === "string" && name.toLowerCase() === header)
        ? names
        : [...names, header]
    })
  )

/** Wraps plain handlers; `required` and `optional` say whether the key must be sent. */
export interface Wrapper {
  readonly required: <E, R>(
    handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>,
    options?: WrapOptions
  ) => Effect.Effect<HttpServerResponse.HttpServerResponse, E, R | Subject | HttpServerRequest.HttpServerRequest>
  readonly optional: Wrapper["required"]
  /** A handler that is not idempotent: a request with the key is refused (400), one without it runs. */
  readonly notIdempotent: Wrapper["required"]
}

export interface WrapOptions {
  /**
   * The route pattern that names the operation (with the method), e.g. `/transfers/:id`.
   * Default: the pattern of the router route the handler runs in (`RouteContext`, its prefix
   * included); a handler outside a router (a whole `HttpEffect`) must give it.
   */
  readonly route?: string
}

/**
 * For plain handlers: `HttpRouter.add("POST", path, wrapper.required(handler))`,
 * `HttpRouter.route`, or a whole `HttpEffect` with `{ route }`. Execution begins when the
 * handler is called: every response it gives below 500 is stored; validate by failing
 * (`HttpServerRequest.schemaBodyJson`), not by answering 400, to keep a refusal from being
 * stored. The request needs a `Subject` (`Subject.identify(verify)`).
 */
export const wrapper = (
  options: Options = {}
): Effect.Effect<Wrapper, DurableConfigError, SqlClient.SqlClient | MutationLedger.MutationLedger> =>
  Effect.gen(function*() {
    const settings = yield* Options_.decode(options)
    const run = yield* IdempotentRequest.make(settings)
    const routeOf = (wrap: WrapOptions) =>
      wrap.route !== undefined ? Effect.succeed(wrap.route) : Effect.flatMap(
        Effect.serviceOption(HttpRouter.RouteContext),
        Option.match({
          onSome: ({ route }) => Effect.succeed(route.path as string),
          onNone: () => Effect.die(new Error("Idempotency.wrapper: a handler outside a router route needs { route }"))
        })
      )
    const wrap =
      (part: IdempotentRequest.Route) =>
      <E, R>(handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>, wrapOptions: WrapOptions = {}) =>
        Effect.flatMap(routeOf(wrapOptions), (route) => run(part, route, handler))
    return {
      required: wrap({ required: true }),
      optional: wrap({ required: false }),
      notIdempotent: wrap({ required: false, refuseKey: true })
    }
  })
