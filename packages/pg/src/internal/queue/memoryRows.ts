/**
 * The in-memory outbox's rows (`memory.ts`) and what a row's state says: open, its lease
 * running, what a topic's limits count.
 */
import type { MemoryRow } from "../../OutboxMemory.js"

/** A row of the outbox, as the table holds it (mutable here, read-only to tests). */
export type Row = { -readonly [K in keyof MemoryRow]: MemoryRow[K] }

/** A time on the `Clock` as the substrate returns times: ISO-8601 UTC. */
export const iso = (millis: number) => new Date(millis).toISOString()

/** Neither delivered nor dead. */
export const open = (row: Row) => row.projectedAt === null && row.deadAt === null

/** Open and held by a lease that runs at `now`. */
export const leaseRunning = (row: Row, now: number) => open(row) && row.claimedUntil !== null && row.claimedUntil > now

/** A topic's messages (of one group, when given) holding a running lease: what its limits count. */
export const inFlightAt = (all: ReadonlyArray<Row>, now: number) => (topic: string, group?: string | null) =>
  all.filter((row) => row.topic === topic && (group === undefined || row.group === group) && leaseRunning(row, now))
    .length
