import * as Cursor from "@effect-durable/core/Cursor"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { describe, expect, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import * as Durable from "../src/Durable.js"
import { DurableSettings, layerSettings } from "../src/DurableConfig.js"
import * as Keyset from "../src/Keyset.js"
import * as Migrations from "../src/Migrations.js"
import * as MutationLedger from "../src/MutationLedger.js"
import * as Outbox from "../src/Outbox.js"
import { database } from "./support.js"

const build = <E>(layer: Layer.Layer<Durable.Services, E>) => Effect.scoped(Layer.build(layer))
const withEnv = (entries: Record<string, string>) =>
  Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord(entries))

describe("Durable.layer configuration", () => {
  it.effect("bad configuration fails at layer construction with DurableConfigError naming the field", () =>
    Effect.gen(function*() {
      const url = Redacted.make("postgres://nobody@127.0.0.1:1/none")
      const cases: ReadonlyArray<readonly [Durable.WithoutKeys<Durable.Options>, string]> = [
        [{ connection: { url, poolSize: -1 } }, "poolSize"],
        [{ connection: { url, poolSize: 1.5 } }, "poolSize"],
        [{ connection: { url: Redacted.make("") } }, "url"],
        [{ connection: { url: Redacted.make("mysql://x") } }, "url"],
        [{ connection: { url, applicationName: "" } }, "applicationName"],
        [{ connection: { url, connectTimeout: -5 } }, "connectTimeout"],
        [{ connection: { url }, settings: { schema: "not-an-identifier" } }, "schema"],
        [{ connection: { url }, settings: { schema: `x"; DROP SCHEMA public; --` } }, "schema"],
        [{ connection: { url }, settings: { lockTimeout: 0 } }, "lockTimeout"],
        [{ connection: { url }, settings: { statementTimeout: "-1 second" } }, "statementTimeout"]
      ]
      for (const [options, field] of cases) {
        const error = yield* Effect.flip(build(Durable.layer(options)))
        expect(error).toMatchObject({ _tag: "DurableConfigError", field })
      }
    }))

  it.effect("configuration read from the environment names the variable, what it is for and an example, before any connection", () =>
    Effect.gen(function*() {
      // Port 1 answers nobody: a DatabaseError here would mean a connection was tried first.
      const url = "postgres://x@127.0.0.1:1/x"
      const cases: ReadonlyArray<readonly [Record<string, string>, string]> = [
        [{}, "DATABASE_URL"],
        [{ DATABASE_URL: "   " }, "DATABASE_URL"],
        [{ DATABASE_URL: url, DURABLE_POOL_SIZE: "-3" }, "DURABLE_POOL_SIZE"],
        [{ DATABASE_URL: url, DURABLE_POOL_SIZE: "many" }, "DURABLE_POOL_SIZE"],
        [{ DATABASE_URL: url, DURABLE_SCHEMA: "9lives" }, "DURABLE_SCHEMA"],
        [{ DATABASE_URL: url, DURABLE_LOCK_TIMEOUT: "-5 seconds" }, "DURABLE_LOCK_TIMEOUT"],
        [{ DATABASE_URL: url, DURABLE_OUTBOX_MAX_PAYLOAD_BYTES: "0" }, "DURABLE_OUTBOX_MAX_PAYLOAD_BYTES"],
        [{ DATABASE_URL: url, DURABLE_OUTBOX_MAX_ATTEMPTS: "-1" }, "DURABLE_OUTBOX_MAX_ATTEMPTS"],
        [{ DATABASE_URL: url, DURABLE_PREPARED_STATEMENTS: "sometimes" }, "DURABLE_PREPARED_STATEMENTS"],
        [{ DATABASE_URL: url, CURSOR_KEYS: "k1=short" }, "CURSOR_KEYS"]
      ]
      for (const [env, field] of cases) {
        const error = yield* Effect.flip(
          build(Durable.layerConfig({ cursorKeys: Cursor.keyringConfig })).pipe(withEnv(env))
        )
        expect(error).toMatchObject({ _tag: "DurableConfigError", field })
        // Every message says what the variable is for and gives a value that works.
        expect(error.message).toContain(`e.g. ${field}=`)
      }
      const missing = yield* Effect.flip(build(Durable.layerConfig()).pipe(withEnv({})))
      expect(missing.message).toContain("the PostgreSQL URL of the application's database")
    }))

  it.layer(database())((it) => {
    it.effect("builds the client and every service from configuration, migrating when asked", () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase.TestDatabase
        const env = {
          DATABASE_URL: Redacted.value(db.url),
          DURABLE_SCHEMA: "from_config",
          DURABLE_POOL_SIZE: "3",
          DURABLE_APPLICATION_NAME: "durable-config-test",
          DURABLE_LOCK_TIMEOUT: "2 seconds",
          DURABLE_OUTBOX_MAX_PAYLOAD_BYTES: "64"
        }
        const [settings, outcome, appName] = yield* Effect.gen(function*() {
          const ledger = yield* MutationLedger.MutationLedger
          const sql = yield* SqlClient.SqlClient
          const outcome = yield* ledger.execute(
            { subject: "s", operation: "op", key: "k" },
            { kind: "k", eligibility: new Uint8Array(), fingerprint: new Uint8Array(32) as never },
            Effect.succeed(MutationLedger.accept({ ok: true }))
          )
          const outbox = yield* Outbox.Outbox
          yield* outbox.enqueue("configured", { ok: true })
          const tooBig = yield* Effect.flip(outbox.enqueue("configured", { blob: "x".repeat(100) }))
          expect(tooBig).toMatchObject({ _tag: "PayloadTooLarge", limit: 64 })
          const [row] = yield* sql<{ name: string }>`SELECT current_setting('application_name') AS name`
          return [yield* DurableSettings, outcome, row!.name] as const
        }).pipe(Effect.provide(Durable.layerConfig({ migrate: true })), withEnv(env))
        expect(settings.schema).toBe("from_config")
        expect(outcome._tag).toBe("First")
        expect(appName).toBe("durable-config-test")
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql`SELECT key FROM from_config.mutation_records`
        expect(rows).toEqual([{ key: "k" }])
        expect(yield* sql`SELECT topic, payload FROM from_config.outbox`).toEqual([{
          topic: "configured",
          payload: { ok: true }
        }])
      }))

    it.effect("DURABLE_PREPARED_STATEMENTS=false sends every statement unprepared (for a transaction pooler)", () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase.TestDatabase
        const preparedAfterQueries = (prepared: string) =>
          Effect.gen(function*() {
            const sql = yield* SqlClient.SqlClient
            // Two statements on one connection: a named one would be kept in pg_prepared_statements.
            return yield* sql.withTransaction(Effect.gen(function*() {
              yield* sql`SELECT 1 AS one`
              const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_prepared_statements`
              return row!.n
            }))
          }).pipe(
            Effect.provide(Durable.layerConfig({ migrate: true })),
            withEnv({
              DATABASE_URL: Redacted.value(db.url),
              DURABLE_SCHEMA: "prepared_cfg",
              DURABLE_PREPARED_STATEMENTS: prepared
            })
          )
        expect(yield* preparedAfterQueries("false")).toBe(0)
        expect(yield* preparedAfterQueries("true")).toBeGreaterThan(0)
      }))
  })
})

describe("Durable.layer at start", () => {
  it.layer(database())((it) => {
    it.effect("a database never migrated is refused at build with SchemaVersionMismatch saying how to migrate", () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase.TestDatabase
        const error = yield* Effect.flip(
          build(Durable.layer({ connection: { url: db.url }, settings: { schema: "never_migrated" } }))
        )
        expect(error).toMatchObject({
          _tag: "SchemaVersionMismatch",
          schema: "never_migrated",
          found: 0,
          needed: Migrations.latestVersion
        })
        expect(error.message).toContain("migrate: true")
        // With migrate: true the same start succeeds.
        yield* build(
          Durable.layer({ connection: { url: db.url }, settings: { schema: "never_migrated" }, migrate: true })
        )
      }))

    it.effect("a schema behind the code, or ahead of it (a rolled-back deploy), is refused at build", () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase.TestDatabase
        const sql = yield* SqlClient.SqlClient
        const options = { connection: { url: db.url }, settings: { schema: "versions" } }
        yield* Migrations.migrate({ upTo: Migrations.latestVersion - 1 }).pipe(
          Effect.provide(layerSettings({ schema: "versions" }))
        )
        expect(yield* Effect.flip(build(Durable.layer(options)))).toMatchObject({
          _tag: "SchemaVersionMismatch",
          found: Migrations.latestVersion - 1
        })
        yield* build(Durable.layer({ ...options, migrate: true }))
        yield* sql`INSERT INTO versions.schema_migrations (version, name) VALUES (${
          Migrations.latestVersion + 1
        }, 'from the future')`
        const ahead = yield* Effect.flip(build(Durable.layer(options)))
        expect(ahead).toMatchObject({ _tag: "SchemaVersionMismatch", found: Migrations.latestVersion + 1 })
        expect(ahead.message).toContain("newer than this code knows")
      }))
  })
})

describe("Durable's layers and Keyset", () => {
  const secret = Redacted.make("durable-test-secret-of-16+ bytes")
  const appKeyset = Keyset.layer.pipe(Layer.provide(Cursor.layer([{ id: "app", secret }])))
  const pageOfTwo = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`CREATE TABLE IF NOT EXISTS composed (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())`
    yield* sql`TRUNCATE composed`
    yield* sql`INSERT INTO composed SELECT FROM generate_series(1, 3)`
    const keyset = yield* Keyset.Keyset
    const first = yield* keyset.page({ table: "composed", subject: "s", limit: 2 })
    return yield* keyset.page({ table: "composed", subject: "s", limit: 2, cursor: first.nextCursor! })
  })

  it("without cursor keys, no layer of Durable provides a Keyset, by its type", () => {
    // @ts-expect-error a substrate without keys provides no Keyset to shadow the application's
    const over: Layer.Layer<Keyset.Keyset, unknown, SqlClient.SqlClient> = Durable.layerOver({ migrate: true })
    // @ts-expect-error nor does the one that builds its own client
    const layer: Layer.Layer<Keyset.Keyset, unknown> = Durable.layer({ connection: { url: secret } })
    // @ts-expect-error nor the one from configuration, unless told where the keys are
    const config: Layer.Layer<Keyset.Keyset, unknown> = Durable.layerConfig({ migrate: true })
    const withKeys: Layer.Layer<Keyset.Keyset, unknown, SqlClient.SqlClient> = Durable.layerOver({
      cursorKeys: [{ id: "k1", secret }]
    })
    const fromConfig: Layer.Layer<Keyset.Keyset, unknown> = Durable.layerConfig({ cursorKeys: Cursor.keyringConfig })
    // A plain options value (its keys unknown to the type) builds a layer too; one that cannot
    // be known to hold keys promises no Keyset.
    const plain: Durable.Options = { connection: { url: secret } }
    const fromPlain: Layer.Layer<Durable.Services, unknown> = Durable.layer(plain)
    const overPlain: Durable.OverOptions = { migrate: true }
    const fromOverPlain = Durable.layerOver(overPlain)
    // @ts-expect-error the plain value's layer promises no Keyset
    const plainKeyset: Layer.Layer<Keyset.Keyset, unknown> = Durable.layer(plain)
    const configPlain: Durable.ConfigOptions = { migrate: true }
    const fromConfigPlain: Layer.Layer<Durable.Services, unknown> = Durable.layerConfig(configPlain)
    expect(
      [over, layer, config, withKeys, fromConfig, fromPlain, fromOverPlain, plainKeyset, fromConfigPlain].every(
        Layer.isLayer
      )
    ).toBe(true)
  })

  it.layer(database())((it) => {
    it.effect("an application's own Keyset.layer merged beside a keyless substrate, either side, is the Keyset that pages", () =>
      Effect.gen(function*() {
        for (
          const composed of [
            Layer.mergeAll(appKeyset, Durable.layerOver({ migrate: true })),
            Layer.mergeAll(Durable.layerOver({ migrate: true }), appKeyset)
          ]
        ) {
          const page = yield* pageOfTwo.pipe(Effect.provide(composed))
          expect(page.items).toHaveLength(1)
        }
      }))

    it.effect("given cursor keys, the substrate's own Keyset pages; given them in configuration, it needs them at build", () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase.TestDatabase
        const page = yield* pageOfTwo.pipe(
          Effect.provide(Durable.layerOver({ migrate: true, cursorKeys: [{ id: "k1", secret }] }))
        )
        expect(page.items).toHaveLength(1)
        const env = { DATABASE_URL: Redacted.value(db.url), DURABLE_SCHEMA: "keyset_config" }
        const configured = yield* pageOfTwo.pipe(
          Effect.provide(Durable.layerConfig({ migrate: true, cursorKeys: Cursor.keyringConfig })),
          withEnv({ ...env, CURSOR_KEYS: "k1=a secret of sixteen bytes or more" })
        )
        expect(configured.items).toHaveLength(1)
        const missing = yield* Effect.flip(
          build(Durable.layerConfig({ migrate: true, cursorKeys: Cursor.keyringConfig })).pipe(withEnv(env))
        )
        expect(missing).toMatchObject({ _tag: "DurableConfigError", field: "CURSOR_KEYS" })
        expect(missing.message).toContain("e.g. CURSOR_KEYS=")
      }))
  })
})
