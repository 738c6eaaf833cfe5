import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Telemetry from "@effect-durable/testing/Telemetry"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import * as Projector from "../src/Projector.js"
import * as Publisher from "../src/Publisher.js"
import { freshName, outboxRows, substrate } from "./support.js"

const CANARY = "payload-canary-7f3a"

describe("Projector: a death is never silent", () => {
  it.layer(substrate(), { timeout: "60 seconds" })((it) => {
    it.effect("a permanent failure logs one WARN line naming topic, id, attempts and reason, never the payload", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshName("deaths")
        const id = yield* outbox.enqueue(topic, { secret: CANARY })
        const telemetry = Telemetry.make()
        const counts = yield* Projector.drain({ topics: [topic] }).pipe(
          Effect.provide(Publisher.layerHandler(() => Effect.fail(Publisher.permanent("order 42 does not exist")))),
          TestClock.withLive,
          telemetry.observed
        )
        expect(counts).toMatchObject({ claimed: 1, dead: 1 })
        const deaths = telemetry.entries.filter((entry) => entry.message.includes("is dead"))
        expect(deaths).toHaveLength(1)
        expect(deaths[0]).toMatchObject({
          level: "Warn",
          message:
            `effect-durable projector: message ${id} of topic ${topic} is dead after 1 attempt (a permanent failure): order 42 does not exist`,
          annotations: { messageId: id, topic, attempts: 1, permanent: true }
        })
        expect(telemetry.everything()).not.toContain(CANARY)
      }))

    it.effect("a payload that does not decode is dead with the schema's issues in its last error, and its WARN line quotes none of its values", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const topic = freshName("undecodable")
        const id = yield* outbox.enqueue(topic, { amount: CANARY })
        const telemetry = Telemetry.make()
        yield* Projector.drain({ topics: [topic], schemas: { [topic]: Schema.Struct({ amount: Schema.Number }) } })
          .pipe(
            Effect.provide(Publisher.layerHandler(() => Effect.void)),
            TestClock.withLive,
            telemetry.observed
          )
        const [row] = yield* outboxRows([id])
        expect(row).toMatchObject({ dead: true })
        expect(row!.last_error).toContain("payload does not decode")
        const deaths = telemetry.entries.filter((entry) => entry.message.includes("is dead"))
        expect(deaths.map((entry) => entry.message)).toEqual([
          `effect-durable projector: message ${id} of topic ${topic} is dead after 1 attempt (a permanent failure): payload does not decode with its topic's schema (the issues are in the message's last error)`
        ])
        expect(telemetry.everything()).not.toContain(CANARY)
      }))

    it.effect("a message whose lease ran out once too often is sent to the dead letters by the claim, logged at WARN and counted", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const sql = yield* SqlClient.SqlClient
        const topic = freshName("exhausted")
        const id = yield* outbox.enqueue(topic, { secret: CANARY })
        const table = sql.literal((yield* DurableSettings).table("outbox"))
        // As after nine workers died holding it: the tenth lease has run out too.
        yield* sql`UPDATE ${table} SET lease_expiries = 9, claimed_by = 'gone', claim_generation = 10,
                          claimed_until = now() - interval '1 second' WHERE id = ${id}`
        const telemetry = Telemetry.make()
        yield* Projector.drain({ topics: [topic] }).pipe(
          Effect.provide(Publisher.layerHandler(() => Effect.void)),
          TestClock.withLive,
          telemetry.observed
        )
        expect((yield* outboxRows([id]))[0]).toMatchObject({ dead: true, projected: false })
        const deaths = telemetry.entries.filter((entry) => entry.message.includes(`message ${id} `))
        expect(deaths).toHaveLength(1)
        expect(deaths[0]!.level).toBe("Warn")
        expect(deaths[0]!.message).toContain(`of topic ${topic} is dead: its lease ran out once too often`)
        expect(telemetry.everything()).not.toContain(CANARY)
      }))
  })
})
