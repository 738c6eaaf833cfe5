/**
 * Who a request is for: the authenticated principal or tenant, the first part of an
 * idempotency record's identity, so a replay is only ever served to the subject whose
 * request created it. HttpApi's own security middleware runs inside the route, after the
 * idempotency middleware, so the subject comes from a route middleware of its own that runs
 * first (`Idempotency.middleware(api).combine(Subject.identify(...))`).
 *
 * @since 0.1.0
 */
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Option from "effect/Option"

/**
 * The request's verified subject (1-256 UTF-8 bytes), or `None` for a request without valid
 * credentials: a key sent without one is refused with 401 before any lookup.
 */
export class Subject extends Context.Service<Subject, Option.Option<string>>()("@effect-durable/http/Subject") {}

/**
 * A route middleware that provides `Subject` from `verify`. It never refuses a request itself
 * (routes without a key, public routes, keep working); use the same `verify` in your API's
 * security middleware so that the two cannot disagree. When verifying needs services, write
 * your own `HttpRouter.middleware<{ provides: Subject }>()` the same way.
 */
export const identify = (verify: (request: HttpServerRequest.HttpServerRequest) => Effect.Effect<Option.Option<string>>) =>
  HttpRouter.middleware<{ provides: Subject }>()((httpEffect) =>
    Effect.flatMap(
      HttpServerRequest.HttpServerRequest,
      (request) => Effect.flatMap(verify(request), (subject) => Effect.provideService(httpEffect, Subject, subject))
    )
  )
