// The commands that change rows: redrive and discard (asked first, in committed batches, with
// progress; Ctrl-C leaves whole batches), purge (with its floor and --dry-run). Checked in the
// database, row by row.
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { cliOn, deadLetters, enqueue, freshTopic, json, rowsOf, Substrate } from "./support.js"

describe("effect-durable redrive, discard, purge", () => {
  it.layer(Substrate, { timeout: "120 seconds" })((it) => {
    it.effect("without --yes and without a terminal to ask on, a bulk action refuses and changes nothing", () =>
      Effect.gen(function*() {
        const topic = freshTopic("refuse")
        yield* deadLetters(topic, 2)
        const refused = yield* cliOn(["dead-letters", "redrive", "--all", "--topic", topic])
        expect(refused).toMatchObject({ code: 2, stdout: "" })
        expect(refused.stderr.trim()).toBe(
          `effect-durable: redrive 2 dead letters (topic ${topic})? Refusing without --yes: there is no terminal to ask on.`
        )
        const neither = yield* cliOn(["dead-letters", "discard", "--yes"])
        expect(neither.code).toBe(2)
        expect(neither.stderr).toContain("name the messages with --id, or pass --all")
        expect((yield* rowsOf(topic)).every((r) => r.dead)).toBe(true)
      }))

    it.effect("redrive --all makes every matching dead letter ready with fresh attempts, in batches, progress on stderr", () =>
      Effect.gen(function*() {
        const topic = freshTopic("redrive")
        const other = freshTopic("redrive-other")
        yield* deadLetters(topic, 5)
        yield* deadLetters(other, 1)
        const result = yield* cliOn([
          "dead-letters",
          "redrive",
          "--all",
          "--topic",
          topic,
          "--batch-size",
          "2",
          "--yes",
          "--json"
        ])
        expect(result.code).toBe(0)
        expect(json(result)).toEqual({ redriven: 5 })
        expect(result.stderr.trim().split("\n")).toEqual(["redrive: 2/5", "redrive: 4/5", "redrive: 5/5"])
        expect((yield* rowsOf(topic)).map((r) => [r.dead, r.attempts])).toEqual(Array(5).fill([false, 0]))
        expect((yield* rowsOf(other))[0]!.dead).toBe(true)
        const nothing = yield* cliOn(["dead-letters", "redrive", "--all", "--topic", topic, "--yes"])
        expect(nothing).toMatchObject({ code: 0 })
        expect(nothing.stdout.trim()).toBe("nothing to redrive")
      }))

    it.effect("discard --id deletes exactly the dead letters named; one that is not dead is left alone", () =>
      Effect.gen(function*() {
        const topic = freshTopic("discard")
        const dead = yield* deadLetters(topic, 3)
        const [alive] = yield* enqueue(topic, 1)
        const result = yield* cliOn([
          "dead-letters",
          "discard",
          "--id",
          dead[0]!,
          "--id",
          dead[2]!,
          "--id",
          alive!,
          "--yes"
        ])
        expect(result.code).toBe(0)
        expect(result.stdout.trim()).toBe("discarded 2 dead letters")
        expect((yield* rowsOf(topic)).map((r) => r.id)).toEqual([dead[1], alive])
      }))

    it.effect("the stored inbox's dead entries are redriven by consumer", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = sql.literal((yield* DurableSettings).table("inbox"))
        const consumer = freshTopic("consumer")
        for (const id of ["a", "b", "c"]) {
          yield* sql`INSERT INTO ${table} (consumer, message_id, payload, dead_at, last_error) VALUES (${consumer}, ${id}, '{}', now(), 'boom')`
        }
        const listed = yield* cliOn(["dead-letters", "list", "--consumer", consumer, "--json"])
        expect(json(listed).items.map((d: { messageId: string }) => d.messageId)).toEqual(["c", "b", "a"])
        const mixed = yield* cliOn(["dead-letters", "list", "--consumer", consumer, "--topic", "x"])
        expect(mixed.code).toBe(2)
        const redriven = yield* cliOn(["dead-letters", "redrive", "--all", "--consumer", consumer, "--yes", "--json"])
        expect(json(redriven)).toEqual({ redriven: 3 })
        const [left] = yield* sql<
          { n: number }
        >`SELECT count(*)::int AS n FROM ${table} WHERE consumer = ${consumer} AND dead_at IS NOT NULL`
        expect(left!.n).toBe(0)
      }))

    it.effect(
      "Ctrl-C during a redrive stops it between batches: whole batches done, the rest still dead, exit 130",
      () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const table = sql.literal((yield* DurableSettings).table("outbox_messages"))
          const topic = freshTopic("interrupt")
          yield* enqueue(topic, 20_000)
          yield* TestSubstrate.settleByHand("dead", `topic = '${topic}'`, { last_error: "'bad deploy'" })
          let sent = false
          const result = yield* cliOn([
            "dead-letters",
            "redrive",
            "--all",
            "--topic",
            topic,
            "--batch-size",
            "100",
            "--yes"
          ], {
            onStderr: (stderr, child) => {
              if (!sent && stderr.includes("redrive: 100/")) {
                sent = true
                child.kill("SIGINT")
              }
            }
          })
          expect(result.code).toBe(130)
          expect(result.stdout).toBe("")
          expect(result.stderr).toMatch(
            /redrive: interrupted after [\d,]+ of 20,000: whole batches are redriven, the rest untouched/
          )
          const [counts] = yield* sql<{ redriven: number; dead: number }>`
          SELECT count(*) FILTER (WHERE dead_at IS NULL)::int AS redriven, count(*) FILTER (WHERE dead_at IS NOT NULL)::int AS dead
            FROM ${table} WHERE topic = ${topic}`
          expect(counts!.redriven % 100).toBe(0)
          expect(counts!.redriven).toBeGreaterThan(0)
          expect(counts!.redriven).toBeLessThan(20_000)
          expect(counts!.redriven + counts!.dead).toBe(20_000)
        }),
      { timeout: 60_000 }
    )

    it.effect("purge --dry-run counts and purge deletes what is past the retention; under the floor exits 2", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const history = sql.literal((yield* DurableSettings).table("outbox_history"))
        const topic = freshTopic("purge")
        yield* enqueue(topic, 4)
        const worker = yield* OutboxWorker.OutboxWorker
        const claimed = yield* worker.claim({ worker: "test", topics: [topic], limit: 10, lease: "1 minute" })
        yield* worker.markProjectedMany(claimed.map((m) => m.claim))
        yield* sql`UPDATE ${history} SET projected_at = now() - interval '3 days' WHERE id = ANY(${
          claimed.slice(0, 3).map((m) => m.id)
        }::bigint[])`
        const dry = yield* cliOn(["purge", "outbox", "--older-than", "2d", "--dry-run", "--json"])
        expect(json(dry)).toEqual({ schema: "durable", target: "outbox", olderThan: "2 days", wouldDelete: 3 })
        expect(yield* rowsOf(topic)).toHaveLength(4)
        const purged = yield* cliOn(["purge", "outbox", "--older-than", "2 days", "--batch-size", "2"])
        expect(purged.code).toBe(0)
        expect(purged.stdout.trim()).toBe("deleted 3 projected outbox messages older than 2 days")
        expect(purged.stderr).toContain("purge outbox: outbox purge deleted 2 rows so far")
        expect((yield* rowsOf(topic)).map((r) => r.id)).toEqual([claimed[3]!.id])
        const floor = yield* cliOn(["purge", "ledger", "--older-than", "10m"])
        expect(floor.code).toBe(2)
        expect(floor.stderr.trim()).toBe("effect-durable: invalid --older-than: a duration from 1 hour to 520 weeks")
      }))
  })
})
