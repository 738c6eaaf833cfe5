/**
 * Effect 4's `Layer` has no `mapError`: a layer's build failure is mapped here, once.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

/** `self` with its build failure mapped by `f`; its services and memoization unchanged. */
export const mapError =
  <E, E2>(f: (error: E) => E2) => <ROut, RIn>(self: Layer.Layer<ROut, E, RIn>): Layer.Layer<ROut, E2, RIn> =>
    Layer.fromBuild((memoMap, scope) => Effect.mapError(Layer.buildWithMemoMap(self, memoMap, scope), f))
