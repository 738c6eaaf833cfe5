/**
 * The mutation ledger: a retried command has its effect exactly once. A mutation is
 * identified by (subject, operation, key). The first request runs `decide` and stores its
 * outcome in the same transaction as everything `decide` wrote; an exact repeat replays the
 * stored outcome — the very bytes — without running anything; a repeat that differs in kind,
 * eligibility claim or request fingerprint is a `MutationConflict` and changes nothing.
 *
 * Concurrent first requests of one identity serialize on a transaction-scoped advisory
 * lock and re-read after it, so exactly one of them decides. Use READ COMMITTED (the
 * default): under REPEATABLE READ a waiter cannot see the winner's record.
 *
 * `execute` does it all in one call. `begin` and its `record` are the same two steps for a
 * caller that runs the effect itself inside its own transaction (the HTTP middleware).
 *
 * @since 0.1.0
 */
import {
  type DatabaseError,
  InvalidInput,
  MutationConflict,
  MutationInProgress,
  type PayloadTooLarge,
  type UnsupportedJsonValue
} from "@effect-durable/core/Errors"
import type { RequestFingerprint } from "@effect-durable/core/Fingerprint"
import * as Input from "@effect-durable/core/Input"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import * as Ledger from "./internal/ledger.js"
import { isoUtc } from "./internal/timestamps.js"
import { inCallerTransaction, restoreTimeouts, transact } from "./internal/transaction.js"

export interface MutationIdentity {
  /** Who the mutation is for (a tenant, an account): 1-256 bytes. */
  readonly subject: string
  /** What it does (`"create-order"`): 1-128 bytes. */
  readonly operation: string
  /** The client's idempotency key: 1-256 bytes. */
  readonly key: string
}

export interface MutationRequest {
  /** The kind of request (1-64 bytes); a retry with another kind conflicts. */
  readonly kind: string
  /** An opaque eligibility claim (attempt, fence, worker incarnation...), at most 1 KiB. */
  readonly eligibility: Uint8Array
  /** SHA-256 of the request's canonical JSON (`Fingerprint.fingerprint`). */
  readonly fingerprint: RequestFingerprint
}

export type MutationStatus = "accepted" | "rejected"

/**
 * What `decide` concludes; rejections are stored and replayed like acceptances. A JSON
 * response (`accept`, `reject`) or raw bytes with JSON meta beside them (`bytes`: an HTTP
 * body with its status and headers). At most 4 MiB.
 */
export type Decision =
  | { readonly _tag: "Json"; readonly status: MutationStatus; readonly response: unknown }
  | { readonly _tag: "Bytes"; readonly status: MutationStatus; readonly body: Uint8Array; readonly meta: unknown }

export const accept = (response: unknown): Decision => ({ _tag: "Json", status: "accepted", response })
export const reject = (response: unknown): Decision => ({ _tag: "Json", status: "rejected", response })
export const bytes = (status: MutationStatus, body: Uint8Array, meta: unknown): Decision => ({
  _tag: "Bytes",
  status,
  body,
  meta
})

export interface MutationOutcome {
  /** `First`: `decide` ran and its outcome was stored. `Replay`: the stored outcome. */
  readonly _tag: "First" | "Replay"
  readonly status: MutationStatus
  /** A JSON decision's response (a replay parses the stored text: same keys, same order); `null` for bytes. */
  readonly response: unknown
  /** The stored bytes, exactly: the JSON text of `response`, or the raw body. */
  readonly body: Uint8Array
  /** What a `bytes` decision stored beside its body; `null` for JSON. */
  readonly meta: unknown
  /** When the outcome was recorded (database clock), ISO-8601 UTC with microseconds. */
  readonly recordedAt: string
}

/** A stored record, as `lookup` shows it (operators, the admin page). */
export interface StoredMutation {
  readonly kind: string
  readonly status: MutationStatus
  readonly response: unknown
  readonly body: Uint8Array
  readonly meta: unknown
  readonly fingerprint: Uint8Array
  readonly eligibility: Uint8Array
  readonly recordedAt: string
}

/** `begin`'s answer: the stored outcome, or the claim of a first request and how to record it. */
export type Begun =
  | { readonly _tag: "Replay"; readonly outcome: MutationOutcome }
  | {
    readonly _tag: "Claimed"
    /** Stores the outcome, in the same transaction as `begin`; call it once, after the effect. */
    readonly record: (decision: Decision) => Effect.Effect<MutationOutcome, RecordError>
  }

export interface ExecuteOptions {
  /**
   * `false`: when another request of this identity is in flight, fail with
   * `MutationInProgress` at once instead of waiting for it (HTTP 409 in the
   * Idempotency-Key draft). Default `true`.
   */
  readonly wait?: boolean
}

export type ExecuteError =
  | MutationConflict
  | MutationInProgress
  | InvalidInput
  | UnsupportedJsonValue
  | PayloadTooLarge
  | DatabaseError
export type BeginError = MutationConflict | MutationInProgress | InvalidInput | DatabaseError
export type RecordError = UnsupportedJsonValue | PayloadTooLarge | DatabaseError

export class MutationLedger extends Context.Service<MutationLedger, {
  /**
   * Runs `decide` once per identity and stores its outcome, in one transaction (a savepoint
   * inside a caller's transaction). If `decide` fails, nothing it wrote and no record remain.
   */
  readonly execute: <E, R>(
    identity: MutationIdentity,
    request: MutationRequest,
    decide: Effect.Effect<Decision, E, R>,
    options?: ExecuteOptions
  ) => Effect.Effect<MutationOutcome, E | ExecuteError, R>
  /**
   * The first step of `execute`, inside the caller's transaction (refused outside one): lock
   * the identity and read its record. An exact repeat is `Replay`; a first request is
   * `Claimed`, whose `record` stores the outcome in the same transaction after the caller ran
   * its effect. Rolling the transaction back (a failure, a 5xx) leaves no record.
   */
  readonly begin: (
    identity: MutationIdentity,
    request: MutationRequest,
    options?: ExecuteOptions
  ) => Effect.Effect<Begun, BeginError>
  /** The stored record of an identity, if any (reads only; no lock). */
  readonly lookup: (
    identity: MutationIdentity
  ) => Effect.Effect<Option.Option<StoredMutation>, InvalidInput | DatabaseError>
  /**
   * Deletes records older than `olderThan` (at least `PURGE_FLOOR`: a retried request whose
   * record is gone runs its effect again), `batchSize` at a time; returns how many.
   */
  readonly purge: (options: PurgeOptions) => Effect.Effect<number, DatabaseError | InvalidInput>
}>()("@effect-durable/pg/MutationLedger") {}

export interface PurgeOptions {
  readonly olderThan: Duration.Input
  /** Records per DELETE; default 1000. */
  readonly batchSize?: number
}

/** Retention floor of `purge`: records younger than this are never deleted. */
export const PURGE_FLOOR = "1 hour"

const Bytes = (rule: string, valid: (bytes: Uint8Array) => boolean) =>
  Schema.Uint8Array.check(Schema.makeFilter(valid, { message: rule }))

const decodeIdentity = Input.argument(
  "identity",
  Schema.Struct({ subject: Input.Text(256), operation: Input.Text(128), key: Input.Text(256) })
)
const decodeRequest = Input.argument(
  "request",
  Schema.Struct({
    kind: Input.Text(64),
    eligibility: Bytes("bytes, at most 1024", (bytes) => bytes.length <= 1024),
    fingerprint: Bytes("a 32-byte SHA-256 digest", (bytes) => bytes.length === 32)
  })
)
const decodeOlderThan = Input.argument("olderThan", Input.DurationIn({ min: PURGE_FLOOR, max: "520 weeks" }))
const decodeBatchSize = Input.argument("batchSize", Input.Count(100_000))

const validate = (identity: MutationIdentity, request: MutationRequest) =>
  Effect.andThen(decodeIdentity(identity), decodeRequest(request))

export const make: Effect.Effect<MutationLedger["Service"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const records = sql.literal(settings.table("mutation_records"))
    const storage = Ledger.make(sql, settings)

    /**
     * Both steps in the current transaction. Inside a caller's transaction its timeouts are
     * given back when this call is done; a failure rolls the savepoint back, and them with it.
     */
    const steps = (identity: MutationIdentity, request: MutationRequest, wait: boolean, inside: boolean) =>
      Effect.gen(function*() {
        const found = yield* storage.lookup(identity, wait)
        const giveBack = inside
          ? restoreTimeouts(sql, {
            lock_timeout: found.previous_lock_timeout,
            statement_timeout: found.previous_statement_timeout
          })
          : Effect.void
        if (found.kind !== null) {
          const stored = Ledger.storedOf(found)
          const differ = Ledger.differences(stored, request)
          if (differ.length > 0) return yield* new MutationConflict({ ...identity, differences: differ })
          yield* giveBack
          return { _tag: "Replay", outcome: storage.replayOf(stored) } as const
        }
        if (!found.locked) return yield* new MutationInProgress(identity)
        const record = (decision: Decision) =>
          Effect.gen(function*() {
            const encoded = yield* Effect.fromResult(Ledger.encodeDecision(identity, decision))
            const recordedAt = yield* storage.insert(identity, request, decision.status, encoded)
            yield* giveBack
            return { _tag: "First", status: decision.status, ...encoded, recordedAt } satisfies MutationOutcome
          }).pipe(classifySqlErrors("MutationLedger.record"))
        return { _tag: "Claimed", record } as const
      }).pipe(classifySqlErrors("MutationLedger.begin"))

    const execute = Effect.fn("MutationLedger.execute")(function*<E, R>(
      identity: MutationIdentity,
      request: MutationRequest,
      decide: Effect.Effect<Decision, E, R>,
      options: ExecuteOptions = {}
    ): Effect.fn.Return<MutationOutcome, E | ExecuteError, R> {
      yield* validate(identity, request)
      const inside = yield* inCallerTransaction(sql)
      return yield* transact(
        sql,
        "MutationLedger.execute",
        Effect.flatMap(steps(identity, request, options.wait !== false, inside), (begun) =>
          begun._tag === "Replay"
            ? Effect.succeed(begun.outcome)
            // The caller's own statements in decide fail classified too (a lock timeout is retryable).
            : Effect.flatMap(classifySqlErrors("MutationLedger.execute")(decide), begun.record))
      )
    })

    const begin = Effect.fn("MutationLedger.begin")(
      function*(identity: MutationIdentity, request: MutationRequest, options: ExecuteOptions = {}) {
        yield* validate(identity, request)
        if (!(yield* inCallerTransaction(sql))) {
          return yield* new InvalidInput({
            argument: "transaction",
            rule: "begin runs inside sql.withTransaction, and its record in the same transaction"
          })
        }
        return yield* steps(identity, request, options.wait !== false, true)
      }
    )

    const lookup = Effect.fn("MutationLedger.lookup")(function*(identity: MutationIdentity) {
      const { key, operation, subject } = yield* decodeIdentity(identity)
      const rows = yield* sql`
          SELECT true AS locked, '' AS previous_lock_timeout, '' AS previous_statement_timeout, kind, eligibility,
                 request_fingerprint, status, response, response_body, response_meta,
                 ${sql.literal(isoUtc("created_at"))} AS recorded_at
            FROM ${records} WHERE subject = ${subject} AND operation = ${operation} AND key = ${key}`.pipe(
        classifySqlErrors("MutationLedger.lookup")
      )
      return yield* Option.match(Option.fromNullishOr(rows[0]), {
        onNone: () => Effect.succeed(Option.none()),
        onSome: (row) =>
          Effect.map(Effect.orDie(Ledger.decodeLookup(row)), (found) => Option.some(Ledger.storedOf(found)))
      })
    })
    const purge = Effect.fn("MutationLedger.purge")(function*(options: PurgeOptions) {
      const seconds = Duration.toMillis(yield* decodeOlderThan(options.olderThan)) / 1000
      const batchSize = yield* decodeBatchSize(options.batchSize ?? 1000)
      let total = 0
      while (true) {
        // SKIP LOCKED: a record a live request holds is not worth waiting for.
        const deleted = yield* sql<{ one: number }>`
            WITH doomed AS (
              SELECT subject, operation, key FROM ${records}
               WHERE created_at < now() - make_interval(secs => ${seconds})
               ORDER BY created_at LIMIT ${batchSize} FOR UPDATE SKIP LOCKED)
            DELETE FROM ${records} r USING doomed d
             WHERE r.subject = d.subject AND r.operation = d.operation AND r.key = d.key
            RETURNING 1 AS one`.pipe(classifySqlErrors("MutationLedger.purge"))
        total += deleted.length
        if (deleted.length > 0) yield* Effect.logDebug(`effect-durable: purged ${total} mutation records so far`)
        if (deleted.length < batchSize) return total
      }
    })

    return MutationLedger.of({ execute, begin, lookup, purge })
  }
)

/** The ledger over your own `SqlClient` and settings. */
export const layer: Layer.Layer<MutationLedger, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(
  MutationLedger,
  make
)
