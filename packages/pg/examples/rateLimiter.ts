// Effect's own rate limiter (`effect/persistence/RateLimiter`) with its state in PostgreSQL:
// every process of the service shares one budget of 100 calls a minute to a partner's API,
// per partner account, without a Redis beside the database.
import * as RateLimiterStore from "@effect-durable/pg/RateLimiterStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as RateLimiter from "effect/persistence/RateLimiter"

/** `RateLimiter` over the PostgreSQL store (its pruner runs in the layer's scope). */
export const RateLimiterLive = RateLimiter.layer.pipe(Layer.provide(RateLimiterStore.layer()))

/** A call to the partner's API, waiting its turn when the account's budget is spent. */
export const callPartner = <A, E, R>(account: string, call: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const withLimiter = yield* RateLimiter.makeWithRateLimiter
    return yield* call.pipe(withLimiter({
      key: `partner:${account}`,
      algorithm: "token-bucket",
      limit: 100,
      window: "1 minute",
      onExceeded: "delay"
    }))
  })

/** Or refuse instead of waiting: a `RateLimitExceeded` with its `retryAfter` (an HTTP 429's Retry-After). */
export const tryPartner = (account: string) =>
  Effect.gen(function*() {
    const limiter = yield* RateLimiter.RateLimiter
    return yield* limiter.consume({ key: `partner:${account}:strict`, limit: 100, window: "1 minute" })
  })
