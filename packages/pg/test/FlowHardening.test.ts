// Flow control and the rate limiter store as an attacker or a careless operator calls them
// (issue 42): options that are not an object, names that would forge a log line or collapse into
// another name, a period finer than a millisecond, numbers past what SQL holds. Each is a typed
// refusal naming the rule, nothing is written, and a caller's transaction stays usable.
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as RateLimiter from "effect/persistence/RateLimiter"
import * as SqlClient from "effect/sql/SqlClient"
import * as FlowControl from "../src/FlowControl.js"
import * as RateLimiterStore from "../src/RateLimiterStore.js"
import { substrate } from "./support.js"

/** The effect's log lines, as a log sink receives them. */
const logsOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const lines: Array<string> = []
    const result = yield* effect.pipe(
      Effect.provide(
        Logger.layer([Logger.make(({ message }) => void lines.push([message].flat().map(String).join(" ")))])
      )
    )
    return { result, lines }
  })

/** The argument and rule of a typed refusal. */
const refusal = <A>(effect: Effect.Effect<A, unknown>) =>
  Effect.map(Effect.flip(effect), (error: any) => ({ tag: error._tag, argument: error.argument }))

describe("flow control, attacked", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("D18: options that are not an object (null, a string, an array) are a typed refusal naming them, not a TypeError", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        for (const options of [null, "10", [1], 7] as Array<any>) {
          expect(yield* refusal(flow.setLimit("d18", options))).toEqual({ tag: "InvalidInput", argument: "options" })
          expect(yield* refusal(flow.setGroup("d18", "g", options))).toEqual({
            tag: "InvalidInput",
            argument: "options"
          })
          expect(yield* refusal(flow.setInboxLimit("d18", options))).toEqual({
            tag: "InvalidInput",
            argument: "options"
          })
        }
        expect(yield* refusal(flow.setLimit("d18", { rate: "fast" as any }))).toEqual({
          tag: "InvalidInput",
          argument: "rate"
        })
        expect(yield* refusal(flow.setLimit("d18", { groupRate: [] as any }))).toEqual({
          tag: "InvalidInput",
          argument: "groupRate"
        })
        expect((yield* flow.limits).some((limit) => limit.topic === "d18")).toBe(false)
      }))

    it.effect("D14: a name holding a newline or an escape is written to the log as escapes: no forged line, no raw escape", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const topic = "orders\n[info] effect-durable admin: all limits cleared\u001b[2J"
        const { lines } = yield* logsOf(flow.setLimit(topic, { maxInFlight: 5, by: "ops\u202e\r\n" }))
        expect(lines.length).toBe(1)
        expect(lines[0]).not.toMatch(/[\n\r\u001b\u202e]/)
        expect(lines[0]).toContain("orders\\n[info] effect-durable admin: all limits cleared\\u001b[2J")
        expect(lines[0]).toContain("ops\\u202e\\r\\n")
        const group = yield* logsOf(flow.setGroup(topic, "tenant\n1", { maxInFlight: 1 }))
        expect(group.lines[0]).not.toMatch(/[\n\r\u001b]/)
        const inbox = yield* logsOf(flow.setInboxLimit("mail\u001b]0;owned\u0007", { maxInFlight: 2 }))
        expect(inbox.lines[0]).not.toMatch(/[\u001b\u0007]/)
      }))

    it.effect("H16: a rate period is whole milliseconds; 1.5 ms is refused naming rate.per, and 2 ms reads back as 2", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        expect(yield* refusal(flow.setLimit("h16", { rate: { limit: 1, per: "1.5 millis" } }))).toEqual({
          tag: "InvalidInput",
          argument: "rate.per"
        })
        expect(yield* refusal(flow.setInboxLimit("h16", { rate: { limit: 1, per: Duration.micros(2500n) } })))
          .toEqual({ tag: "InvalidInput", argument: "rate.per" })
        yield* flow.setLimit("h16", {
          rate: { limit: 3, per: "2 millis" },
          groupRate: { limit: 1, per: "1501 millis" }
        })
        const [limit] = (yield* flow.limits).filter((l) => l.topic === "h16")
        expect(limit!.rate).toEqual({ limit: 3, perMillis: 2, burst: 3 })
        expect(limit!.groupRate).toEqual({ limit: 1, perMillis: 1501, burst: 1 })
      }))

    it.effect("H17: names with a lone surrogate are refused, so two such names can never write one row", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        expect(yield* refusal(flow.setLimit("t\ud800", { maxInFlight: 1 }))).toEqual({
          tag: "InvalidInput",
          argument: "topic"
        })
        expect(yield* refusal(flow.setLimit("t\udfff", { maxInFlight: 1 }))).toEqual({
          tag: "InvalidInput",
          argument: "topic"
        })
        expect(yield* refusal(flow.setGroup("t", "g\udc00", {}))).toEqual({ tag: "InvalidInput", argument: "group" })
        expect(yield* refusal(flow.setInboxLimit("c\ud83d", { maxInFlight: 1 }))).toEqual({
          tag: "InvalidInput",
          argument: "consumer"
        })
        expect(yield* refusal(flow.setLimit("t", { maxInFlight: 1, by: "\ud800" }))).toEqual({
          tag: "InvalidInput",
          argument: "by"
        })
        // A well-formed pair is a name like any other.
        yield* flow.setLimit("t\ud83d\ude00", { maxInFlight: 1 })
        expect((yield* flow.limits).map((l) => l.topic)).toContain("t\ud83d\ude00")
      }))
  })
})

describe("the rate limiter store, attacked", () => {
  it.layer(substrate(), { timeout: "2 minutes" })((it) => {
    it.effect("D19: numbers past what SQL holds (1e308 tokens, an epoch past 2^31) are store errors naming the rule; the caller's transaction stays usable", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const store = yield* RateLimiterStore.make()
        const refused = (effect: Effect.Effect<unknown, RateLimiter.RateLimiterError>) =>
          Effect.map(Effect.flip(effect), (error) => error.reason.message)
        const bucket = { key: "d19", tokens: 1, limit: 10, refillRate: Duration.seconds(1), allowOverflow: false }
        yield* sql.withTransaction(Effect.gen(function*() {
          expect(yield* refused(store.tokenBucket({ ...bucket, tokens: 1e308 }))).toMatch(/^invalid tokens: .*at most/)
          expect(yield* refused(store.tokenBucket({ ...bucket, limit: 1e300 }))).toMatch(/^invalid limit: .*at most/)
          expect(yield* refused(store.tokenBucket({ ...bucket, refillRate: Duration.days(1e6) }))).toMatch(
            /^invalid refillRate: .*at most/
          )
          expect(
            yield* refused(
              store.fixedWindow({ key: "d19", tokens: 1e20, refillRate: Duration.seconds(1), limit: undefined })
            )
          )
            .toMatch(/^invalid tokens/)
          expect(
            yield* refused(
              store.adaptiveFeedback({
                key: "d19",
                tokens: 1,
                epoch: 2 ** 31,
                status: 429,
                retryAfter: Duration.seconds(1)
              })
            )
          ).toMatch(/^invalid epoch: an integer/)
          expect(
            yield* refused(
              store.adaptiveFeedback({
                key: "d19",
                tokens: 1,
                epoch: 1.5,
                status: 429,
                retryAfter: Duration.seconds(1)
              })
            )
          ).toMatch(/^invalid epoch: an integer/)
          expect(yield* refused(store.tokenBucket({ ...bucket, key: "k\ud800" }))).toMatch(
            /^invalid key: .*lone surrogate/
          )
          // The transaction is still the caller's: a statement after the refusals runs.
          expect(yield* sql`SELECT 1 AS one`).toEqual([{ one: 1 }])
        }))
        // And the largest accepted values work end to end.
        const [remaining] = yield* store.tokenBucket({ ...bucket, tokens: 1, limit: RateLimiterStore.MAX_TOKENS })
        expect(remaining).toBe(RateLimiterStore.MAX_TOKENS - 1)
      }))
  })
})
