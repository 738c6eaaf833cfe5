// The relay's checker has teeth: a stream in id order where a transaction committed late, a
// message twice, a committed message missing or a rolled-back one published each break it.
import { describe, expect, it } from "@effect/vitest"
import { checkRelay } from "../src/feeds/relayChecker.js"
import type { JournalLine } from "../src/feeds/schema.js"

/** Writers' journals: each uid with when it began and when (and how) it ended. */
const journal = (entries: ReadonlyArray<readonly [uid: string, begin: number, end: number, JournalLine["state"]]>) => ({
  begun: new Map(entries.map(([uid, at]) => [uid, { uid, state: "begin", at } as JournalLine])),
  last: new Map(entries.map(([uid, , at, state]) => [uid, { uid, state, at } as JournalLine]))
})

// "late" took id 1 and committed at 50; "early" took id 2, began at 10 and committed at 20;
// "after" began at 30, once "early" had committed; "gone" rolled back.
const writers = journal([
  ["late", 0, 50, "committed"],
  ["early", 10, 20, "committed"],
  ["after", 30, 40, "committed"],
  ["gone", 35, 45, "aborted"]
])
const message = (uid: string, id: string) => ({ uid, id })

describe("chaos checker: the relay's stream", () => {
  it("commit order holds, with a message published ahead of a lower id", () => {
    const report = checkRelay([message("early", "2"), message("after", "3"), message("late", "1")], writers)
    expect(report.broken).toEqual([])
    expect(report.overtaken).toBe(1)
  })

  it("a message before one whose commit was acknowledged before it began breaks commit order", () => {
    const report = checkRelay([message("late", "1"), message("after", "3"), message("early", "2")], writers)
    expect(report.broken).toEqual([expect.stringMatching(/^relay: 1 messages in the stream before one whose commit/)])
  })

  it("a message twice, one missing, a rolled-back one: each is named", () => {
    const report = checkRelay(
      [message("early", "2"), message("early", "2"), message("gone", "4"), message("late", "1")],
      writers
    )
    expect(report.broken).toEqual([
      "relay: 1 messages in the stream more than once",
      "relay: 1 committed messages not in the stream (first after)",
      "relay: 1 rolled-back messages in the stream (first gone)"
    ])
  })
})
