/**
 * What the outbox and the stored inbox share as leased queues: a claim token that fences
 * every write to a claimed row, how a row is given back, how done rows are purged, and the
 * shapes of dead letters and batch results. Both queues run on one implementation.
 *
 * @since 0.1.0
 */
import type { ClaimMismatch, DatabaseError, InvalidInput, MessageMissing } from "@effect-durable/core/Errors"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"

/** Defaults shared by both queues. */
export const Defaults = {
  /**
   * Leases a row may lose (its worker died or stalled past the lease) before it is dead: a
   * bound for poison messages that kill workers, apart from `maxAttempts`, which counts
   * deliveries that failed.
   */
  maxLeaseExpiries: 10
} as const

/** Proof of a claim: only the worker holding the current generation may settle the row. */
export interface Claim {
  readonly messageId: string
  readonly worker: string
  readonly generation: number
}

/** How a claimed row is given back. */
export interface ReleaseOptions {
  /**
   * Recorded as `last_error`, whatever its length: past 4,096 characters it is cut, saying how
   * long it was; NUL becomes U+FFFD. Counts as a failed delivery.
   */
  readonly error: string
  /** Not claimable again before now + retryDelay (database clock); zero to 365 days. */
  readonly retryDelay: Duration.Input
  /** Straight to the dead letters, whatever the attempts left. */
  readonly permanent?: boolean
}

/** Which done rows a purge deletes, and how many per statement. */
export interface PurgeOptions {
  /** Rows done for longer than this are deleted; each queue documents its floor. */
  readonly olderThan: Duration.Input
  /** Rows per DELETE; default 1000. */
  readonly batchSize?: number
}

/** What a settle operation that can fail for one claim reports. */
export type SettleFailure = ClaimMismatch | MessageMissing

/** What `renewLeases` and `giveBack` report: the claims they applied to, and those stale or missing. */
export interface ManyResult {
  readonly applied: ReadonlyArray<string>
  readonly rejected: ReadonlyArray<SettleFailure>
}

export interface CompleteManyResult {
  /** Ids now done (including those this very claim had already completed). */
  readonly completed: ReadonlyArray<string>
  /** Claims that could not be completed: stale, foreign or missing. */
  readonly rejected: ReadonlyArray<SettleFailure>
}

export interface DeadLetter {
  readonly id: string
  readonly attempts: number
  readonly lastError: string | null
  /** When the row died, ISO-8601 UTC with microseconds. */
  readonly deadAt: string
}

/** A page of dead letters, newest first; `next` is the `before` of the following page. */
export interface DeadLetterPage<Row> {
  readonly items: ReadonlyArray<DeadLetter & Row>
  readonly next: string | undefined
}

/** Marks a claimed row done; idempotent for the claim that already did. */
export type Complete = (claim: Claim) => Effect.Effect<void, SettleFailure | DatabaseError>

/** Marks many claimed rows done in one statement; the ones that cannot be are reported, not failed. */
export type CompleteMany = (claims: ReadonlyArray<Claim>) => Effect.Effect<CompleteManyResult, DatabaseError>

/**
 * Gives a claimed row back: claimable again after `retryDelay`, or dead at once when
 * `permanent` or out of attempts. Returns whether it is dead.
 */
export type Release = (
  claim: Claim,
  options: ReleaseOptions
) => Effect.Effect<{ readonly dead: boolean }, SettleFailure | InvalidInput | DatabaseError>

/** Extends the lease of a row still held by this claim. */
export type RenewLease = (
  claim: Claim,
  lease: Duration.Input
) => Effect.Effect<void, SettleFailure | InvalidInput | DatabaseError>

/** Extends the leases of many claims in one statement; stale or missing ones are reported. */
export type RenewLeases = (
  claims: ReadonlyArray<Claim>,
  lease: Duration.Input
) => Effect.Effect<ManyResult, InvalidInput | DatabaseError>

/**
 * Whether a claim still holds its row, its lease running. Call it in your transaction: the row
 * stays locked until that transaction ends (no other claim takes it meanwhile), so work that
 * commits with the message's outcome is fenced by it; it runs under that transaction's own
 * bounds (outside one it locks nothing). A claim that is not one holds nothing.
 */
export type Holds = (claim: Claim) => Effect.Effect<boolean, DatabaseError>

/**
 * Unclaims rows, in one statement: another worker may claim them at once; no failure is
 * counted, no lease lost. With `unstarted`, the rows were never delivered (the rest of a keyed
 * run behind a failure, a batch whose leases are in doubt): the attempt their claim counted is
 * taken back too. Without it (a worker shutting down, deliveries perhaps under way) it stays.
 */
export type GiveBack = (
  claims: ReadonlyArray<Claim>,
  options?: { readonly unstarted?: boolean }
) => Effect.Effect<ManyResult, DatabaseError>

/** An operator action on rows named by id (at most 10,000); returns the ids it applied to. */
export type ByIds = (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<string>, InvalidInput | DatabaseError>

/**
 * Sends ready or delayed rows to the dead letters, `reason` (1-500 bytes, no NUL) recorded in
 * their `last_error`; a claimed row is left to its delivery. Returns the ids moved.
 */
/**
 * Cancels messages waiting or being delivered: they will not be delivered (again), their
 * state is `cancelled`, and a holder still delivering one is told at once (its delivery is
 * interrupted where it runs, its late writes refused). `reason` (1-500 bytes) goes to the
 * last error, `by` (1-128 bytes, default "an operator") with it. Returns the ids cancelled and
 * which of them were being delivered.
 */
export type Cancel = (
  ids: ReadonlyArray<string>,
  options?: { readonly reason?: string; readonly by?: string }
) => Effect.Effect<
  { readonly cancelled: ReadonlyArray<string>; readonly interrupted: ReadonlyArray<string> },
  InvalidInput | DatabaseError
>

export type MoveAside = (
  ids: ReadonlyArray<string>,
  options: {
    readonly reason: string
    /** Who moves them (1-128 bytes, no NUL), recorded with the reason; default "an operator". */
    readonly by?: string
  }
) => Effect.Effect<ReadonlyArray<string>, InvalidInput | DatabaseError>

/**
 * Deletes done rows older than the retention, in batches; returns how many. The outbox drops
 * whole days of its history: a day already analyzed is counted by its statistics (an estimate,
 * as the planner's), one never analyzed row by row. `Retention.purgeable` counts exactly.
 */
export type Purge = (options: PurgeOptions) => Effect.Effect<number, InvalidInput | DatabaseError>

/**
 * How `explainClaim` explains. `analyze`: the claim runs (`EXPLAIN ANALYZE`) in a transaction
 * that is rolled back, and the plan carries the rows each step returned and its time; the rows it
 * would claim stay locked until then (other claims skip them for that long).
 */
export interface ExplainOptions {
  readonly analyze?: boolean
}

/** The query plan of a claim with these options, planned as the claim function plans it; claims nothing. */
export type ExplainClaim<Options> = (
  options: Options,
  explain?: ExplainOptions
) => Effect.Effect<unknown, InvalidInput | DatabaseError>
