// D13 through the built command: restoring a cancelled message whose dedup key a newer open
// message holds. It exited 5 ("the database is unreachable") and changed nothing; now it says
// the message was left as it is and why, with the exit code of a check that failed (1).
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { cliOn, freshTopic, json, rowsOf, Substrate } from "./support.js"

describe("effect-durable restore, a dedup key held", () => {
  it.layer(Substrate, { timeout: "120 seconds" })((it) => {
    it.effect("D13: restore of a message whose dedup key an open one holds leaves it, says why, exits 1 (not 5)", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const admin = yield* OutboxAdmin.OutboxAdmin
        const topic = freshTopic("d13")
        const first = yield* outbox.enqueue(topic, { n: 1 }, { dedupKey: "k" })
        yield* admin.cancel([first], { by: "test" })
        const second = yield* outbox.enqueue(topic, { n: 2 }, { dedupKey: "k" })
        const result = yield* cliOn(["restore", "--id", first])
        expect(result.code).toBe(1)
        expect(result.stderr).toContain(
          `left as they are (not cancelled, or a dedup key an open message holds): ${first}`
        )
        const asJson = yield* cliOn(["restore", "--id", first, "--id", second, "--json"])
        expect(asJson.code).toBe(1)
        expect(json(asJson)).toEqual({ restored: [], left: [first, second] })
        expect((yield* rowsOf(topic)).map((row) => [row.id, row.dead])).toEqual([[first, true], [second, false]])
      }))
  })
})
