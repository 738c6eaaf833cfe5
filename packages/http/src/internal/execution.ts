/**
 * "Execution began": the one thing a handler tells the middleware. HttpApi decodes the path,
 * query, headers and payload and runs its security middleware *inside* the route, after the
 * idempotency middleware, and answers a failure there with an ordinary 400 or 401 response.
 * Only a mark set by the handler itself tells such a refusal (never stored: the corrected
 * retry must run) from a handler's own 4xx (stored and replayed).
 */
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import { globalValue } from "effect/GlobalValue"

/** Set for the request the middleware runs; `began` flips when the handler starts. */
export interface Marker {
  began: boolean
}

const CurrentMarker = globalValue(
  Symbol.for("@effect-durable/http/internal/execution/CurrentMarker"),
  () => FiberRef.unsafeMake<Marker | undefined>(undefined)
)

/** Runs `effect` with `marker` as the current request's. */
export const within = (marker: Marker) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.locally(effect, CurrentMarker, marker)

/** Marks that the handler began (no-op outside the middleware). */
export const begin: Effect.Effect<void> = Effect.flatMap(FiberRef.get(CurrentMarker), (marker) =>
  Effect.sync(() => {
    if (marker !== undefined) marker.began = true
  }))
