// `effect-durable limits`: list, set, group, clear, run as the built binary; what it sets is
// what the next claim obeys. Bad values exit 2 naming the flag and change nothing.
import * as FlowControl from "@effect-durable/pg/FlowControl"
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
          .toEqual({ topic: "emails", group: "acme", maxInFlight: 2, weight: 3 })
        yield* outbox.enqueueMany([
          { topic: "emails", payload: 1, options: { group: "acme" } },
          { topic: "emails", payload: 2, options: { group: "acme" } },
          { topic: "emails", payload: 3, options: { group: "other" } },
          { topic: "emails", payload: 4, options: { group: "other" } }
        ])
        const claimed = yield* worker.claim({ worker: "w", topics: ["emails"], limit: 10, lease: "1 minute" })
        expect(claimed).toHaveLength(2)
        const listed = yield* cliOn(["limits", "list"])
        expect(listed.stdout).toMatch(/^emails\s+2\s+2\s+1\s+acme: 2, weight 3\s+/m)
        const limits = json(yield* cliOn(["limits", "list", "--json"])).limits as ReadonlyArray<FlowControl.TopicLimit>
        expect(limits).toMatchObject([{ topic: "emails", inFlight: 2, maxInFlight: 2, groupMaxInFlight: 1 }])
        expect(limits[0]!.updatedBy).toMatch(/\(cli\)$/)
        expect((yield* cliOn(["limits", "clear", "emails"])).stdout).toMatch(/^topic emails has no limits now/m)
        expect((yield* cliOn(["limits", "clear", "emails"])).stdout).toMatch(/^topic emails had no limits/m)
        expect(yield* worker.claim({ worker: "w", topics: ["emails"], limit: 10, lease: "1 minute" })).toHaveLength(2)
      }))

    it.effect("bad values exit 2 naming the flag; nothing is set", () =>
      Effect.gen(function*() {
        for (
          const [args, flag] of [
            [["limits", "set", "t", "--max", "0"], "--max"],
            [["limits", "set", "t", "--group-max", "-3"], "--group-max"],
            [["limits", "set", "t"], "--max"],
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
