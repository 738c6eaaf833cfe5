// Flow control is one room: the claim functions (internal/claim) take every rule of limits, slots,
// buckets and capacity counts from the flow room (internal/flow), as the runtime code does, so no
// rule is written twice. This holds the claim room's sources to it: none spells out a rule the
// flow room owns.
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"

const room = path.join(import.meta.dirname, "../src/internal/claim")

/** What only the flow room may write: each rule's own text. */
const rules: ReadonlyArray<readonly [string, RegExp]> = [
  ["the limits lock (flow/limits.ts limitsLock)", /::regclass::oid::integer, 17/],
  ["a slot's lock (flow/capacity.ts slotLock)", /hashtext\(/],
  ["a bucket's tokens (flow/rates.ts bucket)", /flow_tokens"\)\}\(/],
  ["a group's rate (flow/rates.ts groupRate)", /THEN \w+\.group_rate_/],
  ["the entries a claim row still holds (flow/capacity.ts entriesHeld)", /unnest\(\w+\.entries/],
  ["what a key's claims took (flow/capacity.ts takenBy)", /coalesce\(\(SELECT sum\(c\.taken\) FROM/],
  ["a limit's slot count (flow/capacity.ts slotCount)", /greatest\(1, cap \//]
]

describe("the claim room", () => {
  const sources = fs.readdirSync(room).filter((file) => file.endsWith(".ts"))

  it("takes every flow rule from the flow room", () => {
    expect(sources.length).toBeGreaterThan(8)
    const spelled = sources.flatMap((file) => {
      const text = fs.readFileSync(path.join(room, file), "utf8")
      return rules.filter(([, pattern]) => pattern.test(text)).map(([rule]) => `${file}: ${rule}`)
    })
    expect(spelled).toEqual([])
  })

  it("would see a rule spelled out again", () => {
    const copy = "PERFORM pg_advisory_xact_lock(hashtext('x:' || $4), 0); floor(${t(\"flow_tokens\")}(l.tokens))"
    expect(rules.filter(([, pattern]) => pattern.test(copy)).map(([rule]) => rule)).toEqual([
      "a slot's lock (flow/capacity.ts slotLock)",
      "a bucket's tokens (flow/rates.ts bucket)"
    ])
  })
})
