import { describe, expect, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { withAdmin } from "../src/internal/admin.js"
import * as PgServer from "../src/PgServer.js"

const withEnv = (entries: Record<string, string>) =>
  Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord(entries))

describe("PgServer provider choice", () => {
  it.effect("DATABASE_URL wins over every other provider", () =>
    Effect.gen(function*() {
      const server = yield* PgServer.PgServer
      expect(server.provider).toBe("url")
      expect(server.owned).toBe(false)
      expect(Redacted.value(server.url("app_db"))).toBe("postgres://u:p@db.example:5433/app_db")
      const restart = yield* Effect.flip(server.restart)
      expect(restart.reason).toMatch(/server this test owns/)
    }).pipe(
      Effect.provide(PgServer.layer),
      withEnv({ DATABASE_URL: "postgres://u:p@db.example:5433/postgres", EFFECT_DURABLE_TEST_PG: "testcontainers" })
    ))

  it.effect("an unknown provider name is a typed error naming the variable", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Layer.build(PgServer.layer).pipe(Effect.scoped))
      expect(Exit.isFailure(exit)).toBe(true)
      const error = yield* Effect.flip(Layer.build(PgServer.layer).pipe(Effect.scoped))
      expect(error._tag).toBe("PgServerError")
      expect(error.reason).toMatch(/EFFECT_DURABLE_TEST_PG/)
    }).pipe(withEnv({ EFFECT_DURABLE_TEST_PG: "docker-please" })))

  it.effect(
    "testcontainers either starts a server that answers queries or fails fast saying a container runtime is missing",
    () =>
      Effect.gen(function*() {
        const started = Date.now()
        const exit = yield* Effect.exit(
          Effect.scoped(Effect.flatMap(Layer.build(PgServer.layerTestcontainers()), (context) =>
            withAdmin(Context.get(context, PgServer.PgServer).url(), "testcontainers", (client) =>
              client.query("SELECT 1 AS one"))))
        )
        if (Exit.isSuccess(exit)) {
          expect(exit.value.rows).toEqual([{ one: 1 }])
        } else {
          const error = yield* Effect.flip(exit)
          expect(error.provider).toBe("testcontainers")
          expect(error.reason).toMatch(/container runtime|Docker/)
          expect(Date.now() - started).toBeLessThan(30_000)
        }
      }),
    120_000
  )
})
