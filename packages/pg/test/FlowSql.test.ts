// The runtime's flow SQL (internal/flow) says what the live claim functions say: the lock, the
// buckets, the slots and the capacity counts are written out whole in the claim room
// (internal/claim), where a reader finds each path top to bottom. Until each rule has one
// source, this holds the copies to each other.
import { describe, expect, it } from "@effect/vitest"
import { claimFunctions } from "../src/internal/claim/index.js"
import { entriesHeldOfInbox, messagesHeld, slotCount, takenBy } from "../src/internal/flow/capacity.js"
import { CONSUMER_LIMITS, limitsLock, TOPIC_LIMITS } from "../src/internal/flow/limits.js"
import { bucket, groupRate, ownRate } from "../src/internal/flow/rates.js"

const t = (table: string) => `"s"."${table}"`

/** `text` with every run of whitespace one space: the room lays its SQL out for reading. */
const flat = (text: string) => text.replace(/\s+/g, " ")

/** The statement of the claim room that creates `fn`. */
const created = (fn: string) => flat(claimFunctions(t).find((statement) => statement.includes(`FUNCTION ${t(fn)}(`))!)

describe("the runtime's flow SQL", () => {
  it("is the text of the live claim functions: lock, buckets, slots, capacity", () => {
    expect(created("outbox_claim")).toContain(flat(limitsLock(t, TOPIC_LIMITS)))
    expect(created("inbox_claim")).toContain(flat(limitsLock(t, CONSUMER_LIMITS)))
    expect(created("outbox_claim_fair")).toContain(flat(bucket(t, "l", ownRate, "clk")))
    expect(created("inbox_claim_limited")).toContain(flat(bucket(t, "l", ownRate, "clk")))
    for (const column of ["limit", "period", "burst"] as const) {
      expect(created("outbox_claim_limited")).toContain(flat(groupRate(column, "o", "l", "b")))
      expect(created("outbox_claim_fair")).toContain(flat(groupRate(column, "o", "l", "g")))
    }
    expect(created("flow_slots")).toContain(flat(slotCount("cap")))
    expect(created("outbox_claim_limited")).toContain(flat(messagesHeld(t, "c")))
    expect(created("outbox_claim_slots")).toContain(flat(messagesHeld(t, "slot_row")))
    expect(created("inbox_claim_slots")).toContain(flat(entriesHeldOfInbox(t, "slot_row")))
    expect(created("outbox_claim_limited")).toContain(flat(takenBy(t, "l")))
  })
})
