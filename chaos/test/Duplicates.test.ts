import { describe, expect, it } from "@effect/vitest"
import * as Duplicates from "../src/duplicates.js"

const LEASE = 5_000
const delivery = (message_id: string, worker: string, at: number): Duplicates.Delivery => ({ message_id, worker, at })
const fault = (
  kind: Duplicates.Fault["kind"],
  startedAt: number,
  endedAt: number,
  workers: Duplicates.Fault["workers"],
  held: ReadonlyArray<string> = []
): Duplicates.Fault => ({ kind, startedAt, endedAt, workers, held, skipped: false })

describe("chaos checker: every duplicate explained", () => {
  it("a duplicate without any fault is unexplained", () => {
    const result = Duplicates.explain([delivery("1", "w1", 1_000), delivery("1", "w2", 9_000)], [], LEASE)
    expect(result.explained).toBe(0)
    expect(result.unexplained.map((u) => [u.messageId, u.earlier.worker, u.extra.worker])).toEqual([["1", "w1", "w2"]])
  })

  it("a kill of the earlier holder between the deliveries explains the extra one", () => {
    const result = Duplicates.explain(
      [delivery("1", "w1", 1_000), delivery("1", "w2", 9_000), delivery("2", "w3", 1_000)],
      [fault("kill", 2_000, 4_000, ["w1"])],
      LEASE
    )
    expect(result.explained).toBe(1)
    expect([...result.explainedBy]).toEqual([["kill", 1]])
    expect(result.unexplained).toEqual([])
  })

  it("a fault of another worker explains nothing, unless it held the message", () => {
    const deliveries = [delivery("1", "w1", 1_000), delivery("1", "w2", 9_000)]
    expect(Duplicates.explain(deliveries, [fault("stall", 2_000, 8_000, ["w3"])], LEASE).unexplained).toHaveLength(1)
    expect(Duplicates.explain(deliveries, [fault("stall", 2_000, 8_000, ["w3"], ["1"])], LEASE).explained).toBe(1)
  })

  it("a frozen holder's late delivery, after another's, is explained by its freeze", () => {
    // w1 claims, is frozen 2-9 s; w2 takes the lapsed lease at 8 s; w1 wakes and delivers at 9.5 s.
    const result = Duplicates.explain(
      [delivery("1", "w2", 8_000), delivery("1", "w1", 9_500)],
      [fault("stall", 2_000, 9_000, ["w1"])],
      LEASE
    )
    expect(result.explained).toBe(1)
  })

  it("a fault must strike between the deliveries, give or take one lease before the earlier", () => {
    const deliveries = [delivery("1", "w1", 20_000), delivery("1", "w2", 30_000)]
    // After the extra delivery: no.
    expect(Duplicates.explain(deliveries, [fault("restart", 31_000, 33_000, "all")], LEASE).explained).toBe(0)
    // Ended more than a lease before the earlier delivery: no.
    expect(Duplicates.explain(deliveries, [fault("terminate", 10_000, 14_000, "all")], LEASE).explained).toBe(0)
    // Ended within a lease before it (a claim it hit, delivered after): yes.
    expect(Duplicates.explain(deliveries, [fault("terminate", 12_000, 16_000, "all")], LEASE).explained).toBe(1)
  })

  it("commit cuts and skipped faults explain nothing; each extra delivery is counted once, by the latest fault", () => {
    const deliveries = [delivery("1", "w1", 1_000), delivery("1", "w2", 5_000), delivery("1", "w3", 9_000)]
    const result = Duplicates.explain(deliveries, [
      fault("commit-cut", 1_500, 1_600, "all"),
      { ...fault("kill", 1_500, 2_000, ["w1"]), skipped: true },
      fault("kill", 2_000, 3_000, ["w1"]),
      fault("restart", 4_000, 6_000, "all"),
      fault("stall", 6_000, 8_000, ["w2"])
    ], LEASE)
    expect(result.explained).toBe(2)
    expect([...result.explainedBy].sort()).toEqual([["restart", 1], ["stall", 1]])
  })
})
