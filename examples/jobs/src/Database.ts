/**
 * The service's database: DATABASE_URL when it is set, otherwise the development database
 * (an embedded PostgreSQL whose data stays in .effect-durable/postgres), with the substrate
 * migrated and the bank's own tables created. Development defaults stand in for what
 * production sets in the environment (CURSOR_KEYS, WEBHOOK_SECRET).
 */
import * as Cursor from "@effect-durable/core/Cursor"
import * as DevDatabase from "@effect-durable/embedded/DevDatabase"
import * as Durable from "@effect-durable/pg/Durable"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"

/** Used only when the variable is not set. */
export const developmentDefaults: Record<string, string> = {
  CURSOR_KEYS: "dev-1=a development key that signs page cursors",
  WEBHOOK_SECRET: "a development secret that signs webhook deliveries",
  DURABLE_POOL_SIZE: "20"
}

const DevelopmentDefaults = ConfigProvider.layer(
  ConfigProvider.fromEnv().pipe(ConfigProvider.orElse(ConfigProvider.fromEnvRecord(developmentDefaults)))
)

const Tables = Layer.effectDiscard(Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS accounts (
    id serial PRIMARY KEY, owner text NOT NULL, name text NOT NULL, balance integer NOT NULL CHECK (balance >= 0),
    revision integer NOT NULL DEFAULT 1, created_at timestamptz NOT NULL DEFAULT now())`
  yield* sql`CREATE TABLE IF NOT EXISTS transfers (
    id serial PRIMARY KEY, from_account integer NOT NULL REFERENCES accounts, to_account integer NOT NULL REFERENCES accounts,
    amount integer NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`
  yield* sql`CREATE TABLE IF NOT EXISTS entries (
    id serial PRIMARY KEY, account_id integer NOT NULL REFERENCES accounts, transfer_id integer REFERENCES transfers,
    amount integer NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`
  // The order the pages read: (created_at DESC, id DESC) within an account.
  yield* sql`CREATE INDEX IF NOT EXISTS entries_by_account ON entries (account_id, created_at DESC, id DESC)`
  yield* sql`CREATE TABLE IF NOT EXISTS notifications (
    id serial PRIMARY KEY, account_id integer NOT NULL, message_id text NOT NULL, text text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now())`
}))

/** The substrate (SqlClient, ledger, outbox, inbox, CAS, keyset pages signed by CURSOR_KEYS) and the bank's tables. */
export const DatabaseLive = Tables.pipe(
  Layer.provideMerge(Durable.layerConfig({ migrate: true, cursorKeys: Cursor.keyringConfig })),
  Layer.provide(DevDatabase.layerDatabaseUrl())
)

/** The environment, with the development defaults under it; provided to the whole service. */
export const ConfigLive = DevelopmentDefaults
