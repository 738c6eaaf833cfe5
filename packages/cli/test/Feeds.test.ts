// `effect-durable feeds`: list (read, readable, held, and what holds the horizon), reset and
// remove, run as the built binary on the consumers an application registered; `doctor` names
// the transaction that holds the feeds back.
import * as Feed from "@effect-durable/pg/Feed"
import * as Outbox from "@effect-durable/pg/Outbox"
import { eventually, onLiveClock } from "@effect-durable/testing/Eventually"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as SqlClient from "effect/sql/SqlClient"
import { cliOn, json, Substrate } from "./support.js"

describe("effect-durable feeds", () => {
  it.layer(Substrate, { timeout: "120 seconds" })((it) => {
    it.effect("list shows each consumer's lag and what holds the horizon; reset moves a cursor; remove removes it", () =>
      onLiveClock(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        yield* feed.register("search-index", { topics: ["order-placed", "order-cancelled"] })
        yield* outbox.enqueueMany([1, 2, 3].map((n) => ({ topic: "order-placed", payload: { n } })))
        yield* eventually(feed.lag("search-index"), ([c]) => c!.readable === 3)
        yield* feed.consume("search-index", () => Effect.void, { limit: 2 })

        const listed = yield* cliOn(["feeds", "list"])
        expect(listed.code).toBe(0)
        expect(listed.stdout).toMatch(/^search-index\s+order-cancelled, order-placed\s+2\s+1\s+0\s+\d{4}-/m)
        const listedJson = json(yield* cliOn(["feeds", "list", "--json"]))
        expect(listedJson.consumers).toEqual([expect.objectContaining({ name: "search-index", read: 2, readable: 1 })])

        // A writing transaction left open holds every feed back: list and doctor name it.
        const written = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const open = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT set_config('application_name', 'forgotten-migration', true)`
          yield* outbox.enqueue("elsewhere", {})
          yield* Deferred.succeed(written, undefined)
          yield* Deferred.await(release)
        })))
        yield* Deferred.await(written)
        yield* outbox.enqueue("order-placed", { n: 4 })
        const held = yield* eventually(
          cliOn(["feeds", "list", "--json"]).pipe(Effect.map(json)),
          (out) => out.consumers[0].held === 1 && out.holder?.session?.applicationName === "forgotten-migration"
        )
        expect(held.holder.transactionsBehind).toBeGreaterThan(0)
        expect((yield* cliOn(["feeds", "list"])).stdout).toMatch(
          /^horizon held by transaction \d+ of pid \d+ \(forgotten-migration\)/m
        )
        const doctor = json(yield* cliOn(["doctor", "--json"]))
        const check = doctor.checks.find((c: { name: string }) => c.name === "feed horizon")
        expect(check.detail).toMatch(/forgotten-migration/)
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(open)

        const reset = yield* cliOn(["feeds", "reset", "search-index", "--from", "beginning"])
        expect(reset.code).toBe(0)
        expect(reset.stdout).toMatch(/^feed consumer search-index reads from beginning on: \d+ messages to read now/m)
        expect((yield* feed.lag("search-index"))[0]).toMatchObject({ position: "0", lastId: "0" })
        expect(json(yield* cliOn(["feeds", "reset", "search-index", "--from", "now", "--json"])).consumer.name)
          .toBe("search-index")

        const unknown = yield* cliOn(["feeds", "reset", "no-such-consumer", "--from", "now"])
        expect(unknown.code).toBe(1)
        expect(unknown.stderr).toMatch(/no feed consumer "no-such-consumer"/)
        const badFrom = yield* cliOn(["feeds", "reset", "search-index", "--from", "yesterday"])
        expect(badFrom.code).toBe(2)
        expect(badFrom.stderr).toMatch(/--from expects beginning, now or/)

        expect((yield* cliOn(["feeds", "remove", "search-index"])).stdout).toMatch(
          /^removed feed consumer search-index/m
        )
        expect((yield* cliOn(["feeds", "remove", "search-index"])).code).toBe(1)
        expect((yield* cliOn(["feeds", "list"])).stdout).toMatch(/^no feed consumers/m)
      })))
  })
})
