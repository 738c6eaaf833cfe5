/**
 * Who a request is for: the authenticated principal or tenant, the first part of an
 * idempotency record's identity, so a replay is only ever served to the subject whose
 * request created it.
 *
 * The `Idempotency` middleware requires it. On an `HttpApi` it comes from a middleware that
 * wraps the idempotency middleware (one added to the endpoint after it, or to its group or
 * API): best your API's own security middleware, which then declares `provides: Subject` and
 * provides `Option.some(user)` beside its user; or `Subject.Identify` (`layerIdentify(verify)`),
 * which never refuses a request. On plain router routes, `identify(verify)` provides it.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as Layer from "effect/Layer"
import type * as Option from "effect/Option"

/**
 * The request's verified subject (1-256 UTF-8 bytes), or `None` for a request without valid
 * credentials: a key sent without one is refused with 401 before any lookup.
 */
export class Subject extends Context.Service<Subject, Option.Option<string>>()("@effect-durable/http/Subject") {}

/** Reads the subject of a request; `None` when it carries no valid credentials. */
export type Verify<R = never> = (
  request: HttpServerRequest.HttpServerRequest
) => Effect.Effect<Option.Option<string>, never, R>

/**
 * A route middleware for `HttpRouter` routes (the `Idempotency.wrapper` handlers) that
 * provides `Subject` from `verify`. It never refuses a request itself (routes without a key,
 * public routes, keep working); use the same `verify` in your own security so that the two
 * cannot disagree. When verifying needs services, write your own
 * `HttpRouter.middleware<{ provides: Subject }>()` the same way.
 */
export const identify = (verify: Verify) =>
  HttpRouter.middleware<{ provides: Subject }>()((httpEffect) =>
    Effect.flatMap(
      HttpServerRequest.HttpServerRequest,
      (request) => Effect.flatMap(verify(request), (subject) => Effect.provideService(httpEffect, Subject, subject))
    )
  )

/**
 * An `HttpApiMiddleware` that provides `Subject` and never refuses a request: for an API
 * without a security middleware of its own (or whose security does not provide `Subject`).
 * Add it after `Idempotency` (`.middleware(Idempotency).middleware(Subject.Identify)`, or on
 * the group), so that it wraps it, and provide `layerIdentify(verify)`.
 */
export class Identify extends HttpApiMiddleware.Service<Identify, { provides: Subject }>()(
  "@effect-durable/http/Subject/Identify"
) {}

/** The `Identify` middleware with `verify`; the services `verify` needs are taken from the layer's context. */
export const layerIdentify = <R = never>(verify: Verify<R>): Layer.Layer<Identify, never, R> =>
  Layer.effect(
    Identify,
    Effect.map(Effect.context<R>(), (context) =>
      Identify.of((httpEffect) =>
        Effect.flatMap(
          HttpServerRequest.HttpServerRequest,
          (request) =>
            Effect.flatMap(
              Effect.provideContext(verify(request), context),
              (subject) => Effect.provideService(httpEffect, Subject, subject)
            )
        )
      ))
  )
