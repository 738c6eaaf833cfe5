// retry-now and move-aside, through the built binary, checked in the database.
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Inbox from "@effect-durable/pg/Inbox"
import * as InboxWorker from "@effect-durable/pg/InboxWorker"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { cliOn, deadLetters, enqueue, freshTopic, json, Substrate } from "./support.js"

/** Claims every message of `topic` and releases each for a retry an hour away. */
const retrying = (topic: string, n: number, orderingKey?: string) =>
  Effect.gen(function*() {
    yield* enqueue(topic, n)
    if (orderingKey !== undefined) {
      const sql = yield* SqlClient.SqlClient
      const table = sql.literal((yield* DurableSettings).table("outbox"))
      yield* sql`UPDATE ${table} SET ordering_key = ${orderingKey} WHERE topic = ${topic}`
    }
    const worker = yield* OutboxWorker.OutboxWorker
    const claimed = yield* worker.claim({ worker: "test", topics: [topic], limit: 1000, lease: "1 minute" })
    for (const m of claimed) yield* worker.release(m.claim, { error: "the service is down", retryDelay: "1 hour" })
    return claimed.map((m) => m.id)
  })

const stateOf = (queue: "outbox" | "inbox", ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const table = sql.literal((yield* DurableSettings).table(queue === "outbox" ? "outbox_messages" : queue))
    return yield* sql<{ id: string; due: boolean; dead: boolean; attempts: number; last_error: string | null }>`
      SELECT id::text, available_at <= now() AS due, dead_at IS NOT NULL AS dead, attempt_count AS attempts, last_error
        FROM ${table} WHERE id = ANY(${ids}::bigint[]) ORDER BY id`
  })

describe("effect-durable retry-now, move-aside", () => {
  it.layer(Substrate, { timeout: "120 seconds" })((it) => {
    it.effect("retry-now --id makes messages waiting for their retry deliverable now, attempts kept; the others are named, exit 1", () =>
      Effect.gen(function*() {
        const topic = freshTopic("retry-now")
        const [a, b] = yield* retrying(topic, 2)
        const [fresh] = yield* enqueue(topic, 1)
        const result = yield* cliOn(["retry-now", "--id", a!, "--id", b!, "--json"])
        expect(result.code).toBe(0)
        expect(json(result)).toEqual({ "retried now": [a, b], left: [] })
        expect((yield* stateOf("outbox", [a!, b!])).map((r) => [r.due, r.attempts])).toEqual([[true, 1], [true, 1]])
        const partly = yield* cliOn(["retry-now", "--id", a!, "--id", fresh!])
        expect(partly.code).toBe(1)
        expect(partly.stderr).toContain(`left as they are (not waiting for a retry or a delay): ${a}, ${fresh}`)
        const none = yield* cliOn(["retry-now"])
        expect(none.code).toBe(2)
        expect(none.stderr).toContain("retry-now: name the messages with --id")
      }))

    it.effect("move-aside --id --reason sends a message that blocks its key to the dead letters; the key's next message is claimable", () =>
      Effect.gen(function*() {
        const topic = freshTopic("aside")
        const key = `${topic}-customer`
        const [stuck] = yield* retrying(topic, 1, key)
        const [next] = yield* enqueue(topic, 1)
        const sql = yield* SqlClient.SqlClient
        const table = sql.literal((yield* DurableSettings).table("outbox"))
        yield* sql`UPDATE ${table} SET ordering_key = ${key} WHERE id = ${next!}`
        const worker = yield* OutboxWorker.OutboxWorker
        const claim = worker.claim({ worker: "w", topics: [topic], limit: 10, lease: "1 minute" })
        expect(yield* claim).toEqual([])
        const refused = yield* cliOn(["move-aside", "--id", stuck!, "--reason", "blocks the customer"])
        expect(refused.code).toBe(2)
        expect(refused.stderr).toContain("Refusing without --yes")
        const result = yield* cliOn(["move-aside", "--id", stuck!, "--reason", "blocks the customer", "--yes"])
        expect(result).toMatchObject({ code: 0 })
        expect(result.stdout.trim()).toBe(`moved aside: ${stuck}`)
        const [row] = yield* stateOf("outbox", [stuck!])
        expect(row).toMatchObject({ dead: true })
        expect(row!.last_error).toMatch(/^the service is down; dead: moved aside by .+ \(cli\): blocks the customer$/)
        expect((yield* claim).map((m) => m.id)).toEqual([next])
        const noReason = yield* cliOn(["move-aside", "--id", next!, "--yes"])
        expect(noReason.code).toBe(2)
      }))

    it.effect("dead-letters list --json shows each message's error group; --error takes it as shown, a raw error or the start of either", () =>
      Effect.gen(function*() {
        const topic = freshTopic("groups")
        const ids = yield* deadLetters(topic, 2, (id) => `payment ${id} declined: 50% of 100_000`)
        yield* deadLetters(topic, 1, () => "payment provider down")
        const listed = json<{ items: Array<{ id: string; errorGroup: string }> }>(
          yield* cliOn(["dead-letters", "list", "--topic", topic, "--json"])
        )
        const group = "payment # declined: #% of #_# (dead: a permanent failure)"
        expect(listed.items.filter((m) => ids.includes(m.id)).map((m) => m.errorGroup)).toEqual([group, group])
        const matching = (error: string) =>
          Effect.map(
            cliOn(["dead-letters", "list", "--topic", topic, "--error", error, "--json"]),
            (result) => json<{ items: Array<{ id: string }> }>(result).items.length
          )
        expect(yield* matching(group)).toBe(2)
        expect(yield* matching(`payment ${ids[0]} declined: 50% of 100_000`)).toBe(2)
        expect(yield* matching("payment 9 decl")).toBe(2)
        expect(yield* matching("payment")).toBe(3)
        // % and _ are themselves, not wildcards.
        expect(yield* matching("payment # declined: #_ of")).toBe(0)
      }))

    it.effect("--inbox acts on the stored inbox's entries", () =>
      Effect.gen(function*() {
        const consumer = freshTopic("inbox-ops")
        const inbox = yield* Inbox.Inbox
        yield* inbox.receive(consumer, "m-1", {})
        yield* inbox.receive(consumer, "m-2", {})
        const worker = yield* InboxWorker.InboxWorker
        const entries = yield* worker.claim({ consumer, worker: "w", limit: 10, lease: "1 minute" })
        for (const e of entries) yield* worker.release(e.claim, { error: "down", retryDelay: "1 hour" })
        const [first, second] = entries.map((e) => e.id)
        expect((yield* cliOn(["retry-now", "--inbox", "--id", first!])).code).toBe(0)
        expect((yield* cliOn(["move-aside", "--inbox", "--id", second!, "--reason", "by hand", "--yes"])).code).toBe(0)
        expect((yield* stateOf("inbox", [first!, second!])).map((r) => [r.due, r.dead])).toEqual([[true, false], [
          false,
          true
        ]])
      }))

    it.effect("cancel --id stops waiting messages for good (exit 1 naming one that was not open); restore brings them back", () =>
      Effect.gen(function*() {
        const topic = freshTopic("cli-cancel")
        const [a, b] = yield* enqueue(topic, 2)
        const sql = yield* SqlClient.SqlClient
        const messages = sql.literal((yield* DurableSettings).table("outbox_messages"))
        const cancelled = yield* cliOn(["cancel", "--id", a!, "--id", "999999", "--reason", "withdrawn", "--yes"])
        expect(cancelled.code).toBe(1)
        expect(cancelled.stdout).toContain(`cancelled: ${a}`)
        expect(cancelled.stderr).toMatch(/left as they are \(not waiting or being delivered.*\): 999999/)
        const [row] = yield* sql<{ cancelled: boolean; last_error: string }>`
          SELECT cancelled_at IS NOT NULL AS cancelled, last_error FROM ${messages} WHERE id = ${a!}::bigint`
        expect(row).toMatchObject({
          cancelled: true,
          last_error: expect.stringMatching(/^cancelled by .+: withdrawn$/)
        })
        const status = yield* cliOn(["status", "--json"])
        expect(json(status).topics.find((t: { topic: string }) => t.topic === topic)).toMatchObject({
          cancelled: 1,
          ready: 1
        })
        const restored = yield* cliOn(["restore", "--id", a!, "--id", b!, "--json"])
        expect(json(restored)).toEqual({ restored: [a], left: [b] })
        expect(restored.code).toBe(1)
      }))
  })
})
