/**
 * A PostgreSQL store for Effect's own rate limiter (`effect/persistence/RateLimiter`, which
 * ships memory and Redis stores): the same limits shared by every process of an application
 * that already has PostgreSQL, with no Redis beside it. Fixed windows, token buckets and the
 * adaptive (429 Retry-After) limiter each keep a row per key (migration 19); every operation
 * is one round trip that takes its key's row lock for one statement, so concurrent callers on
 * any number of processes never both take the last token.
 *
 * The clock: the database's by default (one clock for every process, whatever their own
 * clocks say), or the application's `Clock` (`clock: "application"`: `TestClock` drives it in
 * tests, as it drives the memory store). Rows past their expiry count as absent, and the
 * layer's pruner deletes them every `pruneEvery`.
 *
 * ```ts
 * const RateLimiterLive = RateLimiter.layer.pipe(Layer.provide(RateLimiterStore.layer()))
 * ```
 *
 * Bad input (a key with NUL or over 1,024 bytes, tokens or limits that are not finite
 * numbers, a refill rate of zero) fails with `RateLimitStoreError` naming the rule, before
 * anything is written.
 *
 * @since 0.4.0
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import { printable } from "@effect-durable/core/Printable"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as RateLimiter from "effect/persistence/RateLimiter"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"

/**
 * Milliseconds since the epoch: the caller's time (`given`, the application's clock) or, without
 * one, the database's clock, as the store's functions read it.
 */
const millisNow = (given: string) => `coalesce(${given}, extract(epoch FROM clock_timestamp())::float8 * 1000)`

/** The longest key, in UTF-8 bytes. */
export const MAX_KEY_BYTES = 1024

/** How long adaptive state outlives its window (the memory and Redis stores' grace). */
const ADAPTIVE_GRACE_MILLIS = 60_000
/** The longest adaptive window or cooldown. */
const ADAPTIVE_MAX_WINDOW_MILLIS = 60 * 60 * 1000
/** Expired rows deleted per table per statement of a prune. */
const PRUNE_BATCH = 10_000

export interface StoreOptions {
  /** Whose clock times the limits: the database's (default) or the application's `Clock`. */
  readonly clock?: "database" | "application"
  /** How often expired rows are deleted (default 5 minutes; at least 1 second, at most 1 day). */
  readonly pruneEvery?: Duration.Input
}

const decodeOptions = Input.options(
  Schema.Struct({
    clock: Schema.optional(Schema.Literals(["database", "application"])),
    pruneEvery: Schema.optional(Input.DurationIn({ min: "1 second", max: "1 day" }))
  }),
  "RateLimiterStore"
)

const storeError = (message: string, cause?: unknown) =>
  new RateLimiter.RateLimiterError({ reason: new RateLimiter.RateLimitStoreError({ message, cause }) })

const encoder = new TextEncoder()

/** The most tokens, limit or cost one call may name: far past any real limit, far inside float8's exact integers. */
export const MAX_TOKENS = 1_000_000_000_000
/** The longest window or refill period, in milliseconds (one year). */
export const MAX_WINDOW_MILLIS = 366 * 24 * 60 * 60 * 1000
/** The largest epoch of adaptive state (PostgreSQL's integer). */
const MAX_EPOCH = 2 ** 31 - 1

interface NumberRule {
  readonly value: number
  /** Zero refused too. */
  readonly positive: boolean
  readonly max: number
  readonly integer?: boolean
}

const tokens = (value: number): NumberRule => ({ value, positive: false, max: MAX_TOKENS })
const window = (value: number, positive = true): NumberRule => ({ value, positive, max: MAX_WINDOW_MILLIS })

/**
 * The store's own checks: the interface has one error, so a refusal is a store error naming the
 * rule. Every number is bounded, so none reaches SQL to overflow there (which would abort a
 * caller's transaction with a generic message).
 */
const checked = (options: { readonly key: string }, numbers: { readonly [name: string]: NumberRule }) => {
  const key = options.key
  if (
    typeof key !== "string" || key.includes("\u0000") || !Input.isWellFormed(key) ||
    encoder.encode(key).length > MAX_KEY_BYTES
  ) {
    return Effect.fail(
      storeError(`invalid key: text of at most ${MAX_KEY_BYTES} bytes, without NUL or a lone surrogate`)
    )
  }
  for (const [name, { integer, max, positive, value }] of Object.entries(numbers)) {
    if (
      typeof value !== "number" || !Number.isFinite(value) || value < 0 || (positive && value === 0) || value > max ||
      (integer === true && !Number.isInteger(value))
    ) {
      return Effect.fail(
        storeError(
          `invalid ${name}: ${integer === true ? "an integer" : "a finite number"} ${
            positive ? "greater than zero" : "of zero or more"
          } and at most ${max}`
        )
      )
    }
  }
  return Effect.void
}

const millisOf = (duration: Duration.Duration) => Duration.toMillis(duration)

/** The store over decoded options; `layer` provides it with its pruner. */
export const make = (
  options: StoreOptions = {}
): Effect.Effect<RateLimiter.RateLimiterStore["Service"], DurableConfigError, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const decoded = yield* decodeOptions(options)
    const sql = yield* SqlClient.SqlClient
    const t = (yield* DurableSettings).table
    const fn = (name: string) => sql.literal(t(name))
    // NULL: the database's clock.
    const now = decoded.clock === "application" ? Clock.currentTimeMillis : Effect.succeed(null)
    /** One operation's function call at the store's clock: its one row, or a store error. */
    const call = <Row>(
      operation: string,
      statement: (at: number | null) => Effect.Effect<ReadonlyArray<Row>, unknown>
    ) =>
      Effect.flatMap(now, statement).pipe(
        Effect.mapError((cause) => storeError(`Failed to execute ${operation} rate limiting command`, cause)),
        Effect.map((rows) => rows[0]!)
      )

    const fixedWindow: RateLimiter.RateLimiterStore["Service"]["fixedWindow"] = (o) =>
      Effect.gen(function*() {
        const refill = millisOf(o.refillRate)
        yield* checked(o, {
          tokens: tokens(o.tokens),
          refillRate: window(refill),
          ...(o.limit === undefined ? {} : { limit: tokens(o.limit) })
        })
        const row = yield* call("fixedWindow", (at) =>
          sql<{ count: number; ttl: number }>`SELECT count, ttl FROM ${fn("rate_fixed_window")}(
            ${o.key}, ${o.tokens}::float8, ${refill}::float8, ${o.limit ?? null}::float8, ${at}::float8)`)
        return [row.count, row.ttl] as const
      })

    const tokenBucket: RateLimiter.RateLimiterStore["Service"]["tokenBucket"] = (o) =>
      Effect.gen(function*() {
        const refill = millisOf(o.refillRate)
        yield* checked(o, {
          tokens: tokens(o.tokens),
          limit: { ...tokens(o.limit), positive: true },
          refillRate: window(refill)
        })
        const row = yield* call("tokenBucket", (at) =>
          sql<{ remaining: number; elapsed: number }>`SELECT remaining, elapsed FROM ${fn("rate_token_bucket")}(
            ${o.key}, ${o.tokens}::float8, ${o.limit}::float8, ${refill}::float8, ${o.allowOverflow}::boolean,
            ${at}::float8)`)
        return [row.remaining, row.elapsed] as const
      })

    const adaptiveConsume: RateLimiter.RateLimiterStore["Service"]["adaptiveConsume"] = (o) =>
      Effect.gen(function*() {
        const fallback = millisOf(o.fallbackWindow)
        yield* checked(o, {
          tokens: tokens(o.tokens),
          fallbackWindow: window(fallback, false)
        })
        const row = yield* call("adaptiveConsume", (at) =>
          sql<{ delay: number; epoch: number; phase: RateLimiter.AdaptivePhase }>`
            SELECT delay, epoch, phase FROM ${fn("rate_adaptive_consume")}(
              ${o.key}, ${o.tokens}::float8, ${fallback}::float8, ${ADAPTIVE_GRACE_MILLIS}::float8, ${at}::float8)`)
        return {
          delay: row.delay <= 0 ? Duration.zero : Duration.millis(row.delay),
          epoch: row.epoch,
          phase: row.phase
        }
      })

    const adaptiveFeedback: RateLimiter.RateLimiterStore["Service"]["adaptiveFeedback"] = (o) =>
      Effect.gen(function*() {
        // Only a 429 with a Retry-After teaches the limiter anything.
        if (o.status !== 429 || o.retryAfter === undefined) return
        const asked = millisOf(o.retryAfter)
        const retryAfter = Number.isNaN(asked) || asked <= 0 ? 1 : Math.min(asked, ADAPTIVE_MAX_WINDOW_MILLIS)
        yield* checked(o, {
          tokens: tokens(o.tokens),
          epoch: { value: o.epoch, positive: false, max: MAX_EPOCH, integer: true }
        })
        yield* call("adaptiveFeedback", (at) =>
          sql`SELECT ${fn("rate_adaptive_feedback")}(
            ${o.key}, ${o.epoch}::integer, ${o.tokens}::float8, ${retryAfter}::float8,
            ${ADAPTIVE_GRACE_MILLIS}::float8, ${ADAPTIVE_MAX_WINDOW_MILLIS}::float8, ${at}::float8)`)
      })

    return RateLimiter.RateLimiterStore.of({ fixedWindow, tokenBucket, adaptiveConsume, adaptiveFeedback })
  })

/**
 * Deletes the rows past their expiry (a window over, a bucket full again, adaptive state
 * forgotten): at most `PRUNE_BATCH` per table per statement, until none is left. Returns how
 * many went.
 */
export const prune = (
  options: Pick<StoreOptions, "clock"> = {}
): Effect.Effect<number, RateLimiter.RateLimiterError, SqlClient.SqlClient | DurableSettings> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const t = (yield* DurableSettings).table
    const at = options.clock === "application" ? yield* Clock.currentTimeMillis : null
    let total = 0
    for (const table of ["rate_windows", "rate_buckets", "rate_adaptive"]) {
      for (;;) {
        // The expiry is asked again of the row the DELETE finds: one a caller has just written
        // (it waited for that caller's lock) is not expired any more, and stays.
        const expired = `expires_at <= ${millisNow("$1::float8")}`
        const gone = yield* sql.unsafe<{ n: number }>(
          `WITH gone AS (
            DELETE FROM ${t(table)} WHERE key IN (
              SELECT key FROM ${t(table)} WHERE ${expired} LIMIT ${PRUNE_BATCH})
              AND ${expired}
            RETURNING 1)
          SELECT count(*)::int AS n FROM gone`,
          [at]
        ).pipe(
          Effect.mapError((cause) => storeError("Failed to prune expired rate limiter rows", cause))
        )
        total += gone[0]!.n
        if (gone[0]!.n < PRUNE_BATCH) break
      }
    }
    return total
  })

/**
 * `RateLimiterStore` on PostgreSQL, with its pruner running in the layer's scope (a failed
 * prune is logged and tried again at the next interval).
 */
export const layer = (
  options: StoreOptions = {}
): Layer.Layer<RateLimiter.RateLimiterStore, DurableConfigError, SqlClient.SqlClient | DurableSettings> =>
  Layer.effect(
    RateLimiter.RateLimiterStore,
    Effect.gen(function*() {
      const store = yield* make(options)
      const every = Duration.fromInputUnsafe(options.pruneEvery ?? "5 minutes")
      yield* prune(options).pipe(
        Effect.tap((n) =>
          n > 0 ? Effect.logDebug(`effect-durable: pruned ${n} expired rate limiter rows`) : Effect.void
        ),
        Effect.catch((error) =>
          Effect.logWarning(`effect-durable: rate limiter prune failed: ${printable(error.message)}`)
        ),
        Effect.repeat(Schedule.spaced(every)),
        Effect.forkScoped
      )
      return store
    })
  )
