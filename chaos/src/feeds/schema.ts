/**
 * The feed schedule's names and table (`npm run chaos -- --feeds`): writers enqueue on one
 * topic, some holding their transactions open for a while after the enqueue (a late commit,
 * behind messages with later positions), some rolling back on purpose; every consumer process
 * applies what it reads by inserting it into `chaos_feed.applied` in the transaction that
 * advances its cursor; relay processes publish the topic from a replication slot into JetStream
 * (`Relay`), in commit order. No unique key there on purpose: a message applied twice shows as a
 * second row, and `seq` (taken at insert) is the order each consumer applied in.
 */
export const TOPIC = "chaos.feed"
export const CONSUMERS = ["projection", "search-index", "audit-export"] as const
/** Processes running each consumer at once (one applies at a time; the other waits its turn). */
export const PROCESSES_PER_CONSUMER = 2
export const WRITERS = 3
/** Relay processes publishing the topic from one replication slot (one publishes at a time). */
export const RELAYS = 2
export const SLOT = "chaos_relay"
/** The JetStream stream the relay publishes into (its subject: the topic). */
export const STREAM = "CHAOS_FEED"

export const APPLICATION = {
  writer: (index: number) => `chaos-feed-writer-${index}`,
  consumer: (index: number) => `chaos-feed-consumer-${index}`,
  relay: (index: number) => `chaos-feed-relay-${index}`,
  admin: "chaos-feed-admin"
} as const

/** A process prints this once it runs; the schedule waits for it. */
export const READY = "chaos feed process ready"

export const DDL = [
  `CREATE SCHEMA chaos_feed`,
  `CREATE TABLE chaos_feed.applied (
    seq bigserial PRIMARY KEY,
    consumer text NOT NULL,
    message_id bigint NOT NULL,
    uid text NOT NULL,
    position bigint NOT NULL,
    process text NOT NULL
  )`
]

/** A writer's journal line: what it began, and what it was told. */
export interface JournalLine {
  readonly uid: string
  readonly state: "begin" | "committed" | "aborted" | "unknown"
  /** `performance.timeOrigin + performance.now()` when the line was written. */
  readonly at: number
  /** How long the transaction stayed open after its enqueue, in ms. */
  readonly delay?: number
}

export interface WriterConfig {
  readonly url: string
  readonly index: number
  readonly seed: number
  /** Wall-clock time (ms) after which it begins nothing new. */
  readonly until: number
  readonly journal: string
}

export interface ConsumerConfig {
  readonly url: string
  readonly index: number
  readonly consumer: string
  readonly process: string
}

export interface RelayConfig {
  readonly url: string
  readonly index: number
  /** The nats-server's URL. */
  readonly nats: string
}
