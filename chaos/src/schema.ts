import { KEEPER_APPLICATION_NAME } from "@effect-durable/projector/Projector"

/**
 * The chaos suite's own tables and names, shared by the producer, the workers and the
 * checker. The business and effect tables have no unique key on purpose: a command the
 * ledger applied twice, or an effect the inbox let through twice, shows up as a second row.
 */
export const TOPIC = "chaos.order"
/** The inbox consumer under which workers apply each message's effect. */
export const CONSUMER = "chaos-effects"
export const SUBJECT = "chaos"
export const OPERATION = "place-order"

/** `application_name`s, so faults can find each party's backends. */
export const APPLICATION = {
  producer: "chaos-producer",
  workerPrefix: "chaos-worker-",
  worker: (index: number) => `chaos-worker-${index}`,
  admin: "chaos-admin",
  /** The projector's LISTEN connection (the name `@effect-durable/projector` gives it). */
  listener: "effect-durable-listener",
  /** The projector keeper's own connection for lease renewals. */
  keeper: KEEPER_APPLICATION_NAME
} as const

/** A worker prints this to its log once its projector runs; main.ts waits for it. */
export const READY = "chaos worker ready"

export const DDL = [
  `CREATE SCHEMA chaos`,
  // One row per committed command (the ledger must make it exactly one per key).
  `CREATE TABLE chaos.orders (
     key text NOT NULL,
     uid text NOT NULL,
     created_at timestamptz NOT NULL DEFAULT clock_timestamp())`,
  // Written in a transaction of its own after a deliberate rollback: these uids were enqueued
  // and rolled back, and must never be delivered.
  `CREATE TABLE chaos.rolled_back (
     uid text NOT NULL,
     recorded_at timestamptz NOT NULL DEFAULT clock_timestamp())`,
  // Every delivery, committed on its own before the effect, so redeliveries are counted.
  `CREATE TABLE chaos.deliveries (
     message_id bigint NOT NULL,
     uid text NOT NULL,
     worker text NOT NULL,
     attempt integer NOT NULL,
     at timestamptz NOT NULL DEFAULT clock_timestamp())`,
  // The effect applied through the inbox: exactly one row per committed message.
  `CREATE TABLE chaos.effects (
     message_id bigint NOT NULL,
     uid text NOT NULL,
     worker text NOT NULL,
     at timestamptz NOT NULL DEFAULT clock_timestamp())`
] as const

/** Half the commands are keyed, over 100 customers: their messages must be first delivered in id order per key. */
export const orderingKeyOf = (index: number): string | undefined =>
  index % 2 === 0 ? `customer-${(index / 2) % 100}` : undefined

/** The payload of every chaos message. */
export interface Payload {
  readonly uid: string
  readonly key: string
}

/** One line of the producer's journal: what the producer was told about a command. */
export interface JournalEntry {
  readonly key: string
  readonly uid: string
  /** First/Replay: the ledger says committed; RolledBack: rolled back on purpose and recorded. */
  readonly outcome: "First" | "Replay" | "RolledBack"
  /** Failed attempts before the outcome (a cut connection, a terminated backend, a restart). */
  readonly retries: number
  /** The first few failures, for the report. */
  readonly errors: ReadonlyArray<string>
  /** When the outcome was known (epoch ms). */
  readonly at: number
}
