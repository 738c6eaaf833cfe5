import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "../src/DurableConfig.js"
import * as Inbox from "../src/Inbox.js"
import * as InboxAdmin from "../src/InboxAdmin.js"
import * as InboxWorker from "../src/InboxWorker.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxAdmin from "../src/OutboxAdmin.js"
import * as OutboxWorker from "../src/OutboxWorker.js"
import { substrate } from "./support.js"

const freshTopic = () => TestSubstrate.freshName("ops")

interface State {
  readonly id: string
  readonly state: string
  readonly attempt_count: number
  readonly failure_count: number
  readonly last_error: string | null
}

const statesOf = (queue: "outbox" | "inbox", ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // Every outbox message, wherever it is now (the open table holds only open ones).
    const table = sql.literal((yield* DurableSettings).table(queue === "outbox" ? "outbox_messages" : queue))
    const done = sql.literal(queue === "outbox" ? "projected_at" : "processed_at")
    return yield* sql<State>`
      SELECT id::text,
             CASE WHEN dead_at IS NOT NULL THEN 'dead' WHEN ${done} IS NOT NULL THEN 'done'
                  WHEN claimed_until > now() THEN 'claimed' WHEN available_at > now() THEN 'delayed' ELSE 'ready' END AS state,
             attempt_count, failure_count, last_error
        FROM ${table} WHERE id = ANY(${ids}::bigint[]) ORDER BY id`
  })

const claimOutbox = (worker: string, topic: string) =>
  Effect.flatMap(
    OutboxWorker.OutboxWorker,
    (outbox) => outbox.claim({ worker, topics: [topic], limit: 10, lease: "30 seconds" })
  )

describe("operator actions: retry now, move aside", () => {
  it.layer(substrate(), { timeout: "60 seconds" })((it) => {
    it.effect(
      "retry now makes a message waiting out its backoff deliverable at once, its attempts kept; ready, claimed, dead and done ones are left as they are",
      () =>
        Effect.gen(function*() {
          const outbox = yield* Outbox.Outbox
          const worker = yield* OutboxWorker.OutboxWorker
          const admin = yield* OutboxAdmin.OutboxAdmin
          const topic = freshTopic()
          const [backoff, ready, claimed, dead, done] = yield* outbox.enqueueMany(
            Array.from({ length: 5 }, (_, i) => ({ topic, payload: i }))
          )
          const first = yield* claimOutbox("w1", topic)
          const byId = new Map(first.map((m) => [m.id, m]))
          yield* worker.release(byId.get(backoff!)!.claim, { error: "the service is down", retryDelay: "1 hour" })
          yield* worker.release(byId.get(dead!)!.claim, { error: "poison", retryDelay: 0, permanent: true })
          yield* worker.markProjected(byId.get(done!)!.claim)
          yield* worker.giveBack([byId.get(ready!)!.claim])
          const moved = yield* admin.retryNow([backoff!, ready!, claimed!, dead!, done!])
          expect(moved).toEqual([backoff])
          const states = yield* statesOf("outbox", [backoff!, ready!, claimed!, dead!, done!])
          expect(states.map((s) => s.state)).toEqual(["ready", "ready", "claimed", "dead", "done"])
          expect(states[0]).toMatchObject({ attempt_count: 1, failure_count: 1, last_error: "the service is down" })
          // And it is claimed at once, as its second attempt.
          const again = yield* claimOutbox("w2", topic)
          expect(again.find((m) => m.id === backoff)).toMatchObject({ attempt: 2 })
        })
    )

    it.effect(
      "move aside sends a message that blocks its ordering key to the dead letters with the reason; the key's next message is claimable; a claimed one is left to its delivery",
      () =>
        Effect.gen(function*() {
          const outbox = yield* Outbox.Outbox
          const worker = yield* OutboxWorker.OutboxWorker
          const admin = yield* OutboxAdmin.OutboxAdmin
          const topic = freshTopic()
          const key = `${topic}-customer`
          const [stuck, next] = yield* outbox.enqueueMany([
            { topic, payload: "stuck", options: { orderingKey: key } },
            { topic, payload: "next", options: { orderingKey: key } }
          ])
          const [held] = yield* claimOutbox("w1", topic)
          expect(held!.id).toBe(stuck)
          // Being delivered: left alone.
          expect(yield* admin.moveAside([stuck!], { reason: "blocks the customer" })).toEqual([])
          yield* worker.release(held!.claim, { error: "the service is down", retryDelay: "1 hour" })
          // The key is held back behind the retrying message.
          expect(yield* claimOutbox("w1", topic)).toEqual([])
          expect(yield* admin.moveAside([stuck!], { reason: "blocks the customer" })).toEqual([stuck])
          const [state] = yield* statesOf("outbox", [stuck!])
          expect(state).toMatchObject({ state: "dead" })
          expect(state!.last_error).toBe(
            "the service is down; dead: moved aside by an operator: blocks the customer"
          )
          expect((yield* claimOutbox("w1", topic)).map((m) => m.id)).toEqual([next])
          // A dead letter is redriven as any other.
          expect(yield* admin.redrive([stuck!])).toEqual([stuck])
        })
    )

    it.effect("move aside refuses a reason that is empty, over 500 bytes or holds NUL, and changes nothing", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const admin = yield* OutboxAdmin.OutboxAdmin
        const topic = freshTopic()
        const id = yield* outbox.enqueue(topic, 1)
        for (const reason of ["", "x".repeat(501), "nul\u0000"]) {
          const error = yield* Effect.flip(admin.moveAside([id], { reason }))
          expect(error).toMatchObject({ _tag: "InvalidInput", argument: "reason" })
        }
        const [state] = yield* statesOf("outbox", [id])
        expect(state!.state).toBe("ready")
      }))

    it.effect("the stored inbox: retry now hurries a retrying entry, move aside sends an entry to the dead letters", () =>
      Effect.gen(function*() {
        const inbox = yield* Inbox.Inbox
        const worker = yield* InboxWorker.InboxWorker
        const admin = yield* InboxAdmin.InboxAdmin
        const consumer = freshTopic()
        yield* inbox.receive(consumer, "m-1", { n: 1 })
        yield* inbox.receive(consumer, "m-2", { n: 2 })
        const entries = yield* worker.claim({ consumer, worker: "w1", limit: 10, lease: "30 seconds" })
        expect(entries).toHaveLength(2)
        for (const entry of entries) yield* worker.release(entry.claim, { error: "down", retryDelay: "1 hour" })
        const [first, second] = entries.map((entry) => entry.id)
        expect(yield* admin.retryNow([first!])).toEqual([first])
        expect(yield* admin.moveAside([second!], { reason: "a bad payload, handled by hand" })).toEqual([second])
        const states = yield* statesOf("inbox", [first!, second!])
        expect(states.map((s) => s.state)).toEqual(["ready", "dead"])
        expect(states[1]!.last_error).toContain("moved aside by an operator: a bad payload, handled by hand")
        const again = yield* worker.claim({ consumer, worker: "w2", limit: 10, lease: "30 seconds" })
        expect(again.map((entry) => [entry.id, entry.attempt])).toEqual([[first, 2]])
      }))
  })
})
