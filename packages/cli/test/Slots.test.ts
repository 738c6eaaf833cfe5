// `effect-durable doctor` watches the WAL a relay's replication slot keeps (`OutboxLog`), run
// as the built binary on a PostgreSQL of its own that decodes its WAL: unbounded is a warning,
// bounded and caught up is ok, a slot that lost its WAL fails the doctor.
import * as Durable from "@effect-durable/pg/Durable"
import * as OutboxLog from "@effect-durable/pg/OutboxLog"
import * as PgServer from "@effect-durable/testing/PgServer"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { cli, json } from "./support.js"

const Logical = Layer.unwrap(
  Effect.map(
    PgServer.PgServer,
    (server) => Durable.layer({ connection: { url: server.url("postgres") }, migrate: true })
  )
).pipe(Layer.provideMerge(PgServer.layerEmbedded({ settings: { wal_level: "logical", synchronous_commit: "on" } })))

interface Check {
  readonly name: string
  readonly status: string
  readonly detail: string
}

describe("effect-durable doctor: replication slots", () => {
  it.layer(Logical, { timeout: "120 seconds", excludeTestServices: true })((it) => {
    it.effect("warns while a slot may keep unbounded WAL, is ok once bounded, fails when the slot lost its WAL", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const server = yield* PgServer.PgServer
        const url = Redacted.value(server.url("postgres"))
        const slotCheck = Effect.map(
          cli(["doctor", "--json"], { env: { DATABASE_URL: url } }),
          (result) => ({
            code: result.code,
            check: json<{ checks: ReadonlyArray<Check> }>(result).checks.find((c) => c.name === "replication slots")!
          })
        )
        expect((yield* slotCheck).check).toMatchObject({
          status: "ok",
          detail: "no logical replication slots in this database"
        })

        const log = yield* OutboxLog.make
        yield* log.ensure("orders_relay", ["orders"])
        const unbounded = yield* slotCheck
        expect(unbounded.check.status).toBe("warn")
        expect(unbounded.check.detail).toMatch(/^orders_relay keeps [\d.]+ MB; max_slot_wal_keep_size is unbounded/)

        yield* sql`ALTER SYSTEM SET max_slot_wal_keep_size = '1GB'`
        yield* sql`SELECT pg_reload_conf()`
        const bounded = yield* slotCheck
        expect(bounded.check).toMatchObject({ status: "ok" })
        expect(bounded.check.detail).toMatch(/^orders_relay keeps [\d.]+ MB$/)

        // The relay is away while more than the slot may keep is written: a checkpoint ends the slot.
        yield* sql`ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`
        yield* sql`SELECT pg_reload_conf()`
        yield* sql`CREATE TABLE churn (filler text)`
        for (let round = 0; round < 3; round++) {
          yield* sql`INSERT INTO churn SELECT repeat('x', 1000) FROM generate_series(1, 20000)`
          yield* sql`SELECT pg_switch_wal()::text`
          yield* sql`CHECKPOINT`
        }
        const lost = yield* slotCheck
        expect(lost.code).toBe(1)
        expect(lost.check.status).toBe("fail")
        expect(lost.check.detail).toMatch(/^orders_relay \(wal_removed\) lost the WAL it needed/)
      }))
  })
})
