// Concurrent requests with one key: exactly one runs. In flight is detected with a
// transaction-scoped try-lock (409 at once), or waited for (`inFlight: "wait"`), never with a
// lock row that could outlive a crash. The first request is held at a gate after its write,
// so the counts are exact, not a matter of timing.
import { eventually } from "@effect-durable/testing/Eventually"
import { describe, expect, layer } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Ref from "effect/Ref"
import * as SqlClient from "effect/sql/SqlClient"
import { type Call, executions, freshAccount, gate, json, type Reply, send, server, transfersOf } from "./support.js"

const N = 32

/** Sends `n` copies of a request at once; `done` counts those answered. */
const sendAll = (n: number, path: string, call: Call) =>
  Effect.gen(function*() {
    const done = yield* Ref.make(0)
    // Forked one after another from this fiber (a fork is instant; the requests run at once):
    // a child forked inside a concurrent forEach would end with the forEach's own fiber.
    const fibers = yield* Effect.forEach(
      Array.from({ length: n }),
      () => Effect.forkChild(Effect.tap(send(path, call), () => Ref.update(done, (k) => k + 1)))
    )
    return { done, all: Fiber.joinAll(fibers) }
  })

const count = (replies: ReadonlyArray<Reply>, predicate: (reply: Reply) => boolean) => replies.filter(predicate).length

/** Sessions of this database waiting for an advisory lock. */
const lockWaiters = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    (rows) => rows[0]!.n
  ))

describe("concurrent requests with one key", () => {
  layer(server(), { timeout: "2 minutes" })((it) => {
    it.effect("32 at once: one runs, 31 get 409 with Retry-After at once; once it commits, all 31 retries replay it", () =>
      Effect.gen(function*() {
        const account = freshAccount()
        const held = yield* gate(account)
        const call = { body: `{"amount":5}`, key: "together", user: "alice" }
        const path = `/v1/accounts/${account}/transfers`
        const { all, done } = yield* sendAll(N, path, call)
        // 31 are answered while the first is still held after its write.
        yield* eventually(Ref.get(done), (n) => n === N - 1)
        expect(executions(account)).toBe(1)
        yield* Deferred.succeed(held, undefined)
        const replies = yield* all
        const first = replies.filter((reply) => reply.status === 201)
        expect(first).toHaveLength(1)
        expect(first[0]!.headers["idempotent-replayed"]).toBeUndefined()
        const conflicts = replies.filter((reply) => reply.status === 409)
        expect(conflicts).toHaveLength(N - 1)
        for (const reply of conflicts) {
          expect(reply.headers["content-type"]).toBe("application/problem+json")
          expect(reply.headers["retry-after"]).toBe("1")
          expect(json(reply)).toMatchObject({ code: "idempotency-key-in-flight" })
        }
        // The 409'd clients retry after completion: each gets the first response, byte for byte.
        const { all: retries } = yield* sendAll(N - 1, path, call)
        const replayed = yield* retries
        expect(count(replayed, (reply) => reply.status === 201 && reply.headers["idempotent-replayed"] === "true"))
          .toBe(N - 1)
        expect(count(replayed, (reply) => reply.body.equals(first[0]!.body))).toBe(N - 1)
        expect(executions(account)).toBe(1)
        expect(yield* transfersOf(account)).toBe(1)
      }))

    it.effect("while the first is in flight another body is 409; after it commits 422; the original body replays", () =>
      Effect.gen(function*() {
        const account = freshAccount()
        const held = yield* gate(account)
        const path = `/v1/accounts/${account}/transfers`
        const original = yield* Effect.forkChild(send(path, { body: `{"amount":5}`, key: "racing", user: "alice" }))
        yield* eventually(Effect.sync(() => executions(account)), (n) => n === 1)
        const during = yield* send(path, { body: `{"amount":6}`, key: "racing", user: "alice" })
        expect(during.status).toBe(409)
        yield* Deferred.succeed(held, undefined)
        const first = yield* Fiber.join(original)
        expect(first.status).toBe(201)
        expect((yield* send(path, { body: `{"amount":6}`, key: "racing", user: "alice" })).status).toBe(422)
        const again = yield* send(path, { body: `{"amount":5}`, key: "racing", user: "alice" })
        expect([again.status, again.headers["idempotent-replayed"]]).toEqual([201, "true"])
        expect(again.body.equals(first.body)).toBe(true)
        expect(executions(account)).toBe(1)
      }))
  })

  layer(server({ inFlight: "wait" }), { timeout: "2 minutes" })((it) => {
    it.effect("inFlight: wait — 32 at once: one runs, the 31 others wait for it and replay it", () =>
      Effect.gen(function*() {
        const account = freshAccount()
        const held = yield* gate(account)
        const call = { body: `{"amount":5}`, key: "queued", user: "alice" }
        const { all } = yield* sendAll(N, `/v1/accounts/${account}/transfers`, call)
        // The database says when all 31 are queued behind the first one's lock.
        yield* eventually(lockWaiters, (n) => n === N - 1)
        yield* Deferred.succeed(held, undefined)
        const replies = yield* all
        const first = replies.filter((reply) => reply.headers["idempotent-replayed"] === undefined)
        expect(first.map((reply) => reply.status)).toEqual([201])
        expect(
          count(
            replies,
            (reply) => reply.headers["idempotent-replayed"] === "true" && reply.body.equals(first[0]!.body)
          )
        )
          .toBe(N - 1)
        expect(executions(account)).toBe(1)
        expect(yield* transfersOf(account)).toBe(1)
      }))
  })

  layer(server({ inFlight: "wait" }, { settings: { lockTimeout: "300 millis" } }), { timeout: "2 minutes" })((it) => {
    it.effect("inFlight: wait — a wait longer than the lock timeout is 409, and the first request still completes", () =>
      Effect.gen(function*() {
        const account = freshAccount()
        const held = yield* gate(account)
        const path = `/v1/accounts/${account}/transfers`
        const original = yield* Effect.forkChild(send(path, { body: `{"amount":5}`, key: "slow", user: "alice" }))
        yield* eventually(Effect.sync(() => executions(account)), (n) => n === 1)
        const impatient = yield* send(path, { body: `{"amount":5}`, key: "slow", user: "alice" })
        expect(impatient.status).toBe(409)
        expect(json(impatient)).toMatchObject({ code: "idempotency-key-in-flight" })
        yield* Deferred.succeed(held, undefined)
        expect((yield* Fiber.join(original)).status).toBe(201)
        expect((yield* send(path, { body: `{"amount":5}`, key: "slow", user: "alice" })).headers["idempotent-replayed"])
          .toBe("true")
        expect(executions(account)).toBe(1)
      }))
  })
})
