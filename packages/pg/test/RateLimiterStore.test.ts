// The PostgreSQL RateLimiterStore against effect's own memory store: the same operations, in
// any order, at any clock steps (TestClock drives both: the store on the application's clock)
// give the same answers. Then what only a shared store can show: callers on many connections
// at once never take more than the limit (the database's clock), expired rows are pruned, bad
// input is a store error naming the rule, and `RateLimiter.consume` works over it.
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as RateLimiter from "effect/persistence/RateLimiter"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import * as FastCheck from "fast-check"
import * as RateLimiterStore from "../src/RateLimiterStore.js"
import { eventually, substrate } from "./support.js"

type Store = RateLimiter.RateLimiterStore["Service"]

type Step =
  | {
    readonly op: "fixedWindow"
    readonly key: string
    readonly tokens: number
    readonly refill: number
    readonly limit: number | undefined
  }
  | {
    readonly op: "tokenBucket"
    readonly key: string
    readonly tokens: number
    readonly refill: number
    readonly limit: number
    readonly overflow: boolean
  }
  | { readonly op: "consume"; readonly key: string; readonly tokens: number; readonly fallback: number }
  | {
    readonly op: "feedback"
    readonly key: string
    /** "last": the epoch the key's last consume returned (feedback as a client sends it). */
    readonly epoch: number | "last"
    readonly tokens: number
    readonly status: number
    readonly retryAfter: number | undefined
  }
  | { readonly op: "wait"; readonly millis: number }

const key = FastCheck.constantFrom("a", "b")
const tokens = FastCheck.integer({ min: 0, max: 4 })
const step: FastCheck.Arbitrary<Step> = FastCheck.oneof(
  FastCheck.record({
    op: FastCheck.constant("fixedWindow" as const),
    key,
    tokens,
    refill: FastCheck.constantFrom(100, 1000, 12_000),
    limit: FastCheck.option(FastCheck.integer({ min: 0, max: 6 }), { nil: undefined })
  }),
  FastCheck.record({
    op: FastCheck.constant("tokenBucket" as const),
    key,
    tokens,
    refill: FastCheck.constantFrom(100, 1000, 12_000),
    limit: FastCheck.integer({ min: 1, max: 6 }),
    overflow: FastCheck.boolean()
  }),
  FastCheck.record({
    op: FastCheck.constant("consume" as const),
    key,
    tokens: FastCheck.integer({ min: 1, max: 3 }),
    fallback: FastCheck.constantFrom(1000, 60_000)
  }),
  FastCheck.record({
    op: FastCheck.constant("feedback" as const),
    key,
    epoch: FastCheck.oneof(
      { arbitrary: FastCheck.constant("last" as const), weight: 4 },
      { arbitrary: FastCheck.integer({ min: 0, max: 3 }), weight: 1 }
    ),
    tokens: FastCheck.integer({ min: 1, max: 3 }),
    status: FastCheck.constantFrom(200, 429, 429),
    retryAfter: FastCheck.option(FastCheck.integer({ min: 0, max: 20_000 }), { nil: undefined })
  }),
  FastCheck.record({ op: FastCheck.constant("wait" as const), millis: FastCheck.integer({ min: 0, max: 15_000 }) })
)

/**
 * A client's way through the adaptive phases — a 429 with Retry-After, the wait, requests while
 * learning, a second 429 — with random sizes and timings, so every phase is reached (random
 * single steps alone seldom get to "learned").
 */
const learningRound: FastCheck.Arbitrary<ReadonlyArray<Step>> = FastCheck.tuple(
  key,
  FastCheck.integer({ min: 1, max: 3 }),
  FastCheck.integer({ min: 0, max: 10_000 }),
  FastCheck.integer({ min: 0, max: 12_000 }),
  FastCheck.array(FastCheck.integer({ min: 1, max: 3 }), { minLength: 1, maxLength: 4 }),
  FastCheck.integer({ min: 0, max: 10_000 })
).map(([k, first, retryAfter, wait, learning, retryAgain]): ReadonlyArray<Step> => [
  { op: "consume", key: k, tokens: first, fallback: 60_000 },
  { op: "feedback", key: k, epoch: "last", tokens: first, status: 429, retryAfter },
  { op: "wait", millis: wait },
  ...learning.map((tokens): Step => ({ op: "consume", key: k, tokens, fallback: 60_000 })),
  { op: "feedback", key: k, epoch: "last", tokens: 1, status: 429, retryAfter: retryAgain },
  { op: "consume", key: k, tokens: 1, fallback: 60_000 },
  { op: "consume", key: k, tokens: 2, fallback: 60_000 }
])
const chunk = FastCheck.oneof(
  { arbitrary: step.map((s): ReadonlyArray<Step> => [s]), weight: 4 },
  { arbitrary: learningRound, weight: 1 }
)

/** What one step answers, comparable across stores. */
const run = (
  store: Store,
  prefix: string,
  s: Step,
  epochs: ReadonlyMap<string, number>
): Effect.Effect<unknown, unknown> => {
  switch (s.op) {
    case "fixedWindow":
      return store.fixedWindow({
        key: prefix + s.key,
        tokens: s.tokens,
        refillRate: Duration.millis(s.refill),
        limit: s.limit
      })
    case "tokenBucket":
      return store.tokenBucket({
        key: prefix + s.key,
        tokens: s.tokens,
        limit: s.limit,
        refillRate: Duration.millis(s.refill),
        allowOverflow: s.overflow
      })
    case "consume":
      return Effect.map(
        store.adaptiveConsume({
          key: prefix + s.key,
          tokens: s.tokens,
          fallbackLimit: 5,
          fallbackWindow: Duration.millis(s.fallback)
        }),
        (r) => ({ ...r, delay: Duration.toMillis(r.delay) })
      )
    case "feedback":
      return store.adaptiveFeedback({
        key: prefix + s.key,
        epoch: s.epoch === "last" ? epochs.get(s.key) ?? 0 : s.epoch,
        tokens: s.tokens,
        status: s.status,
        retryAfter: s.retryAfter === undefined ? undefined : Duration.millis(s.retryAfter)
      })
    case "wait":
      return TestClock.adjust(Duration.millis(s.millis))
  }
}

describe("RateLimiterStore on PostgreSQL", () => {
  it.layer(substrate({}, { maxConnections: 24 }), { timeout: "3 minutes" })((it) => {
    it.effect("answers as effect's memory store does, for any sequence of operations and clock steps (300 sequences)", () =>
      Effect.gen(function*() {
        const pg = yield* RateLimiterStore.make({ clock: "application" })
        const context = yield* Effect.context<never>()
        let sequence = 0
        // Every adaptive phase is reached somewhere in the runs: the comparison is not vacuous.
        const phases = new Set<string>()
        const check = (steps: ReadonlyArray<Step>) =>
          Effect.runPromiseWith(context)(Effect.gen(function*() {
            const memory = yield* Effect.provide(
              Effect.gen(function*() {
                return yield* RateLimiter.RateLimiterStore
              }),
              RateLimiter.layerStoreMemory
            )
            const prefix = `diff${sequence++}:`
            const epochs = new Map<string, number>()
            for (const [i, s] of steps.entries()) {
              const expected = yield* Effect.result(run(memory, prefix, s, epochs))
              const actual = yield* Effect.result(run(pg, prefix, s, epochs))
              expect(actual, `step ${i}: ${JSON.stringify(s)}`).toEqual(expected)
              if (expected._tag === "Success" && s.op === "consume") {
                const { epoch, phase } = expected.success as RateLimiter.AdaptiveConsumeResult
                phases.add(phase)
                epochs.set(s.key, epoch)
              }
            }
          }))
        yield* Effect.promise(() =>
          FastCheck.assert(
            FastCheck.asyncProperty(FastCheck.array(chunk, { minLength: 1, maxLength: 8 }).map((c) => c.flat()), check),
            { numRuns: 300 }
          )
        )
        expect([...phases].sort()).toEqual(["cooldown", "inactive", "learned", "learning"])
      }))

    it.effect("RateLimiter.consume over it: a token bucket's delays, a fixed window's refusal with retryAfter", () =>
      Effect.gen(function*() {
        const limiter = yield* RateLimiter.make.pipe(
          Effect.provideServiceEffect(RateLimiter.RateLimiterStore, RateLimiterStore.make({ clock: "application" }))
        )
        const bucket = limiter.consume({
          algorithm: "token-bucket",
          onExceeded: "delay",
          window: "1 minute",
          limit: 4,
          key: "consume:bucket"
        })
        for (let i = 0; i < 4; i++) expect(Duration.toMillis((yield* bucket).delay)).toBe(0)
        expect(Duration.toMillis((yield* bucket).delay)).toBe(15_000)
        expect(Duration.toMillis((yield* bucket).delay)).toBe(30_000)
        yield* TestClock.adjust("1 minute")
        expect((yield* bucket).remaining).toBe(1)
        const window = limiter.consume({ onExceeded: "fail", window: "10 seconds", limit: 2, key: "consume:window" })
        yield* window
        yield* window
        const refused = yield* Effect.flip(window)
        expect(refused.reason).toMatchObject({ _tag: "RateLimitExceeded", limit: 2, remaining: 0 })
        expect(Duration.toMillis((refused.reason as RateLimiter.RateLimitExceeded).retryAfter)).toBe(10_000)
        yield* TestClock.adjust("10 seconds")
        expect((yield* window).remaining).toBe(1)
      }))

    it.effect("32 callers on 16 connections at once, the database's clock: exactly the limit of a fixed window and of a token bucket get through", () =>
      Effect.gen(function*() {
        const store = yield* RateLimiterStore.make()
        const limiter = yield* RateLimiter.make.pipe(Effect.provideService(RateLimiter.RateLimiterStore, store))
        for (const algorithm of ["fixed-window", "token-bucket"] as const) {
          const go = yield* Deferred.make<void>()
          const callers = yield* Effect.all(
            Array.from({ length: 32 }, () =>
              Effect.andThen(
                Deferred.await(go),
                Effect.result(limiter.consume({ algorithm, window: "1 hour", limit: 7, key: `race:${algorithm}` }))
              )),
            { concurrency: "unbounded" }
          ).pipe(Effect.forkChild)
          yield* Deferred.succeed(go, undefined)
          const results = yield* Fiber.join(callers)
          expect(results.filter((r) => r._tag === "Success"), algorithm).toHaveLength(7)
          expect(results.filter((r) => r._tag === "Failure"), algorithm).toHaveLength(25)
        }
      }))

    it.effect("rows past their expiry are as good as absent, and pruned", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const store = yield* RateLimiterStore.make()
        yield* store.fixedWindow({ key: "prune:w", tokens: 1, refillRate: Duration.millis(1), limit: undefined })
        yield* store.tokenBucket({
          key: "prune:b",
          tokens: 1,
          limit: 1,
          refillRate: Duration.millis(1),
          allowOverflow: false
        })
        yield* store.tokenBucket({
          key: "prune:kept",
          tokens: 1,
          limit: 1,
          refillRate: Duration.hours(1),
          allowOverflow: false
        })
        // Expired by the database's clock once a few milliseconds have passed.
        yield* sql`SELECT pg_sleep(0.01)`
        expect(yield* RateLimiterStore.prune()).toBeGreaterThanOrEqual(2)
        const left = yield* sql<{ key: string }>`
          SELECT key FROM durable.rate_windows WHERE key LIKE 'prune:%'
          UNION ALL SELECT key FROM durable.rate_buckets WHERE key LIKE 'prune:%'`
        expect(left.map((r) => r.key)).toEqual(["prune:kept"])
      }))

    it.effect("the pruner never deletes a row that a caller wrote while the pruner waited for its lock", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO durable.rate_buckets (key, tokens, refilled_at, expires_at) VALUES ('race:prune', 0, 0, 0)`
        // A caller holds the expired row, and writes a live state once the pruner waits for it.
        const locked = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const caller = yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT 1 FROM durable.rate_buckets WHERE key = 'race:prune' FOR UPDATE`
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(release)
          yield* sql`UPDATE durable.rate_buckets
                        SET expires_at = extract(epoch FROM clock_timestamp())::float8 * 1000 + 3600000
                      WHERE key = 'race:prune'`
        })).pipe(Effect.forkChild)
        yield* Deferred.await(locked)
        const pruning = yield* RateLimiterStore.prune().pipe(Effect.forkChild)
        yield* eventually(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                              WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM%rate_buckets%'`,
          (rows) => rows[0]!.n === 1
        )
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(caller)
        yield* Fiber.join(pruning)
        const left = yield* sql<{ key: string }>`SELECT key FROM durable.rate_buckets WHERE key = 'race:prune'`
        expect(left).toHaveLength(1)
      }))

    it.effect("bad input is a store error naming the rule, before anything is written", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const store = yield* RateLimiterStore.make()
        const refusal = (effect: Effect.Effect<unknown, RateLimiter.RateLimiterError>) =>
          Effect.map(Effect.flip(effect), (e) => e.reason.message)
        const bucket = (o: Partial<Parameters<Store["tokenBucket"]>[0]>) =>
          store.tokenBucket({
            key: "bad",
            tokens: 1,
            limit: 1,
            refillRate: Duration.seconds(1),
            allowOverflow: false,
            ...o
          })
        expect(yield* refusal(bucket({ key: "a\u0000b" }))).toMatch(/^invalid key: .*without NUL/)
        expect(yield* refusal(bucket({ key: "k".repeat(1025) }))).toMatch(/^invalid key: .*1024 bytes/)
        expect(yield* refusal(bucket({ tokens: Number.NaN }))).toMatch(/^invalid tokens: a finite number/)
        expect(yield* refusal(bucket({ tokens: -1 }))).toMatch(/^invalid tokens/)
        expect(yield* refusal(bucket({ limit: 0 }))).toMatch(/^invalid limit: a finite number greater than zero/)
        expect(yield* refusal(bucket({ limit: Infinity }))).toMatch(/^invalid limit/)
        expect(yield* refusal(bucket({ refillRate: Duration.zero }))).toMatch(/^invalid refillRate/)
        expect(
          yield* refusal(store.fixedWindow({ key: "bad", tokens: 1, refillRate: Duration.infinity, limit: 1 }))
        ).toMatch(/^invalid refillRate/)
        expect(
          yield* refusal(store.adaptiveFeedback({
            key: "bad",
            epoch: Number.NaN,
            tokens: 1,
            status: 429,
            retryAfter: Duration.seconds(1)
          }))
        ).toMatch(/^invalid epoch/)
        const rows = yield* sql<{ n: number }>`
          SELECT (SELECT count(*) FROM durable.rate_buckets WHERE key LIKE 'bad%')::int
               + (SELECT count(*) FROM durable.rate_windows WHERE key LIKE 'bad%')::int
               + (SELECT count(*) FROM durable.rate_adaptive WHERE key LIKE 'bad%')::int AS n`
        expect(rows[0]!.n).toBe(0)
        expect(
          yield* Effect.flip(RateLimiterStore.make({ clock: "wall" as never }))
        ).toMatchObject({ _tag: "DurableConfigError", field: "RateLimiterStore.clock" })
      }))

    it.effect("inside a caller's transaction a store operation joins it: rolled back with it", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const store = yield* RateLimiterStore.make()
        yield* Effect.flip(sql.withTransaction(Effect.andThen(
          store.fixedWindow({ key: "tx", tokens: 1, refillRate: Duration.hours(1), limit: 5 }),
          Effect.fail("rollback" as const)
        )))
        const [count] = yield* store.fixedWindow({ key: "tx", tokens: 1, refillRate: Duration.hours(1), limit: 5 })
        expect(count).toBe(1)
      }))
  })
})
