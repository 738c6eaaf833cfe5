// `effect-durable limits`: list, set, group, clear, inbox set|clear, run as the built binary; what it sets is
// what the next claim obeys. Bad values exit 2 naming the flag and change nothing.
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Inbox from "@effect-durable/pg/Inbox"
import * as InboxWorker from "@effect-durable/pg/InboxWorker"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { cliOn, json, Substrate } from "./support.js"

describe("effect-durable limits", () => {
  it.layer(Substrate, { timeout: "120 seconds" })((it) => {
    it.effect("set, group, list and clear act at once: the next claim obeys them", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        expect((yield* cliOn(["limits", "list"])).stdout).toMatch(/^no limits/m)
        const set = yield* cliOn(["limits", "set", "emails", "--max", "2", "--group-max", "1"])
        expect(set.code).toBe(0)
        expect(set.stdout).toMatch(/^topic emails: at most 2 in flight, 1 per group/m)
        expect(json(yield* cliOn(["limits", "group", "emails", "acme", "--max", "2", "--weight", "3", "--json"])))
          .toEqual({ topic: "emails", group: "acme", maxInFlight: 2, weight: 3, rate: null })
        yield* outbox.enqueueMany([
          { topic: "emails", payload: 1, options: { group: "acme" } },
          { topic: "emails", payload: 2, options: { group: "acme" } },
          { topic: "emails", payload: 3, options: { group: "other" } },
          { topic: "emails", payload: 4, options: { group: "other" } }
        ])
        const claimed = yield* worker.claim({ worker: "w", topics: ["emails"], limit: 10, lease: "1 minute" })
        expect(claimed).toHaveLength(2)
        const listed = yield* cliOn(["limits", "list"])
        expect(listed.stdout).toMatch(/^emails\s+2\s+2\s+1\s+-\s+-\s+-\s+acme: 2, weight 3\s+/m)
        const limits = json(yield* cliOn(["limits", "list", "--json"])).limits as ReadonlyArray<FlowControl.TopicLimit>
        expect(limits).toMatchObject([{ topic: "emails", inFlight: 2, maxInFlight: 2, groupMaxInFlight: 1 }])
        expect(limits[0]!.updatedBy).toMatch(/\(cli\)$/)
        expect((yield* cliOn(["limits", "clear", "emails"])).stdout).toMatch(/^topic emails has no limits now/m)
        expect((yield* cliOn(["limits", "clear", "emails"])).stdout).toMatch(/^topic emails had no limits/m)
        expect(yield* worker.claim({ worker: "w", topics: ["emails"], limit: 10, lease: "1 minute" })).toHaveLength(2)
      }))

    it.effect("rates: --rate and --group-rate with their bursts, a group's own --rate; the next claim takes what the buckets hold", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const worker = yield* OutboxWorker.OutboxWorker
        const set = yield* cliOn(["limits", "set", "sms", "--rate", "10/1h", "--burst", "3", "--group-rate", "5/m"])
        expect(set.code).toBe(0)
        expect(set.stdout).toMatch(
          /^topic sms: at most - in flight, - per group, rate 10\/1h \(burst 3\), per-group rate 5\/1m \(burst 5\)/m
        )
        expect(json(yield* cliOn(["limits", "group", "sms", "acme", "--rate", "1/2 hours", "--json"])))
          .toEqual({
            topic: "sms",
            group: "acme",
            maxInFlight: null,
            weight: 1,
            rate: { limit: 1, perMillis: 7_200_000, burst: 1 }
          })
        yield* outbox.enqueueMany([
          { topic: "sms", payload: 1, options: { group: "acme" } },
          { topic: "sms", payload: 2, options: { group: "acme" } },
          { topic: "sms", payload: 3, options: { group: "other" } },
          { topic: "sms", payload: 4, options: { group: "other" } },
          { topic: "sms", payload: 5 }
        ])
        // acme: 1 (its own bucket); other: 2; the topic's burst of 3 takes those three.
        const claimed = yield* worker.claim({ worker: "w", topics: ["sms"], limit: 10, lease: "1 minute" })
        expect(claimed).toHaveLength(3)
        const listed = yield* cliOn(["limits", "list"])
        expect(listed.stdout).toMatch(
          /^sms\s+3\s+-\s+-\s+10\/1h \(burst 3\)\s+0\s+5\/1m \(burst 5\)\s+acme: per group, weight 1, rate 1\/2h \(burst 1\)/m
        )
        yield* cliOn(["limits", "clear", "sms"])
      }))

    it.effect("inbox set and clear: a stored-inbox consumer's limit and rate, listed beside the topics; the next claim obeys them", () =>
      Effect.gen(function*() {
        const inbox = yield* Inbox.Inbox
        const worker = yield* InboxWorker.InboxWorker
        const set = yield* cliOn([
          "limits",
          "inbox",
          "set",
          "invoicing",
          "--max",
          "2",
          "--rate",
          "10/1h",
          "--burst",
          "5"
        ])
        expect(set.code).toBe(0)
        expect(set.stdout).toMatch(/^inbox consumer invoicing: at most 2 in flight, rate 10\/1h \(burst 5\)/m)
        for (let i = 0; i < 6; i++) yield* inbox.receive("invoicing", `m${i}`, { i })
        const claimed = yield* worker.claim({ consumer: "invoicing", worker: "w", limit: 10, lease: "1 minute" })
        expect(claimed).toHaveLength(2)
        const listed = yield* cliOn(["limits", "list"])
        expect(listed.stdout).toMatch(/^INBOX CONSUMER\s+IN FLIGHT/m)
        expect(listed.stdout).toMatch(/^invoicing\s+2\s+2\s+10\/1h \(burst 5\)\s+3\s+/m)
        expect(json(yield* cliOn(["limits", "list", "--json"])).inbox).toMatchObject([
          { consumer: "invoicing", inFlight: 2, maxInFlight: 2, rate: { limit: 10, perMillis: 3_600_000, burst: 5 } }
        ])
        expect(json(yield* cliOn(["limits", "inbox", "set", "invoicing", "--max", "4", "--json"]))).toEqual({
          consumer: "invoicing",
          maxInFlight: 4,
          rate: null
        })
        expect(yield* worker.claim({ consumer: "invoicing", worker: "w", limit: 10, lease: "1 minute" })).toHaveLength(
          2
        )
        expect((yield* cliOn(["limits", "inbox", "clear", "invoicing"])).stdout).toMatch(
          /^inbox consumer invoicing has no limits now/m
        )
        expect((yield* cliOn(["limits", "inbox", "clear", "invoicing"])).stdout).toMatch(
          /^inbox consumer invoicing had no limits/m
        )
        expect(yield* worker.claim({ consumer: "invoicing", worker: "w", limit: 10, lease: "1 minute" })).toHaveLength(
          2
        )
        for (
          const [args, flag] of [
            [["limits", "inbox", "set", "c"], "--max"],
            [["limits", "inbox", "set", "c", "--max", "0"], "--max"],
            [["limits", "inbox", "set", "c", "--rate", "1/0s"], "--rate"],
            [["limits", "inbox", "set", "c", "--burst", "3"], "--rate"]
          ] as const
        ) {
          const result = yield* cliOn([...args])
          expect(result.code, args.join(" ")).toBe(2)
          expect(result.stderr, args.join(" ")).toContain(flag)
        }
        expect(yield* (yield* FlowControl.FlowControl).inboxLimits).toEqual([])
      }))

    it.effect("bad values exit 2 naming the flag; nothing is set", () =>
      Effect.gen(function*() {
        for (
          const [args, flag] of [
            [["limits", "set", "t", "--max", "0"], "--max"],
            [["limits", "set", "t", "--group-max", "-3"], "--group-max"],
            [["limits", "set", "t"], "--max"],
            [["limits", "set", "t", "--rate", "10"], "--rate"],
            [["limits", "set", "t", "--rate", "10/fortnight"], "--rate"],
            [["limits", "set", "t", "--rate", "0/1m"], "--rate"],
            [["limits", "set", "t", "--rate", "10/8d"], "--rate"],
            [["limits", "set", "t", "--rate", "10/1m", "--burst", "0"], "--burst"],
            [["limits", "set", "t", "--burst", "4"], "--rate"],
            [["limits", "set", "t", "--group-rate", "1/0s"], "--group-rate"],
            [["limits", "group", "t", "g", "--rate", "-1/1m"], "--rate"],
            [["limits", "group", "t", "g", "--weight", "5000"], "--weight"]
          ] as const
        ) {
          const result = yield* cliOn([...args])
          expect(result.code, args.join(" ")).toBe(2)
          expect(result.stderr, args.join(" ")).toContain(flag)
        }
        expect(yield* (yield* FlowControl.FlowControl).limits).toEqual([])
      }))
  })
})
