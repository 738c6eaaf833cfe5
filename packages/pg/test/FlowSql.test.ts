// The runtime's flow SQL (internal/flow) says what the live claim functions say: the renewal
// rule, the lock, the buckets, the slots and the capacity counts were written by migrations
// 17-27, which runtime code may no longer import (a released migration is history). Until the
// claim's text lives in the flow room itself, this holds the two copies to each other.
import { describe, expect, it } from "@effect/vitest"
import { entriesHeldOfInbox, messagesHeld, slotCount, takenBy } from "../src/internal/flow/capacity.js"
import { CONSUMER_LIMITS, limitsLock, renewableInTime, TOPIC_LIMITS } from "../src/internal/flow/limits.js"
import { bucket, groupRate, ownRate } from "../src/internal/flow/rates.js"
import * as V17 from "../src/internal/migrations/0017_flow_limits.js"
import * as V18 from "../src/internal/migrations/0018_rate_limits.js"
import * as V25 from "../src/internal/migrations/0025_inbox_limits.js"
import * as V26 from "../src/internal/migrations/0026_claim_rows.js"
import * as V27 from "../src/internal/migrations/0027_capacity_slots.js"

const t = (table: string) => `"s"."${table}"`

describe("the runtime's flow SQL", () => {
  it("is the text of the claim functions of the latest version: lock, renewal, buckets, slots, capacity", () => {
    expect(limitsLock(t, TOPIC_LIMITS)).toBe(V17.limitsLock(t, V17.TOPIC_LIMITS))
    expect(limitsLock(t, CONSUMER_LIMITS)).toBe(V17.limitsLock(t, V25.CONSUMER_LIMITS))
    expect(renewableInTime(t, "q", "$3", TOPIC_LIMITS)).toBe(V18.renewableInTime(t, "q", "$3"))
    expect(renewableInTime(t, "q", "$3", CONSUMER_LIMITS)).toBe(V25.inboxRenewable(t, "q", "$3"))
    expect(bucket(t, "l", ownRate, "clk")).toBe(V18.bucket(t, "l", V18.topicRate, "clk"))
    const ofGroup = (c: "limit" | "period" | "burst") => groupRate(c, "o", "l", "b")
    expect(bucket(t, "b", ofGroup, "clk")).toBe(V18.bucket(t, "b", (c) => V18.groupRate(c, "o", "l", "b"), "clk"))
    expect(slotCount("cap")).toBe(V27.slotCount("cap"))
    expect(messagesHeld(t, "c")).toBe(V26.stillHeld(t, "c"))
    expect(entriesHeldOfInbox(t, "c")).toBe(V25.heldOfClaim(t, "c"))
    expect(takenBy(t, "l")).toBe(V26.takenBy(t, "l"))
  })
})
