/**
 * The mutation ledger: a retried command has its effect exactly once. A mutation is
 * identified by (subject, operation, key). The first request runs `decide` and stores its
 * outcome in the same transaction as everything `decide` wrote; an exact repeat replays the
 * stored outcome without running anything; a repeat that differs in kind, eligibility
 * claim or request fingerprint is a `MutationConflict` and changes nothing.
 *
 * Concurrent first requests of one identity serialize on a transaction-scoped advisory
 * lock and re-read after it, so exactly one of them decides. Use READ COMMITTED (the
 * default): under REPEATABLE READ a waiter cannot see the winner's record.
 *
 * @since 0.1.0
 */
import {
  type DatabaseError,
  type InvalidInput,
  MutationConflict,
  MutationInProgress,
  type UnsupportedJsonValue
} from "@effect-durable/core/Errors"
import { canonicalize, type RequestFingerprint } from "@effect-durable/core/Fingerprint"
import * as Input from "@effect-durable/core/Input"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { DurableSettings } from "./DurableConfig.js"
import { classifySqlErrors } from "./ErrorClassification.js"
import { inline } from "./internal/sqlText.js"
import { isoUtc } from "./internal/timestamps.js"
import { traced } from "./internal/traced.js"
import { advisoryKey, lockForTransaction, lockStatement, transact } from "./internal/transaction.js"

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

/** What `decide` concludes; rejections are stored and replayed like acceptances. */
export interface Decision {
  readonly status: MutationStatus
  /** Any JSON value; it is what every replay returns. */
  readonly response: unknown
}

export const accept = (response: unknown): Decision => ({ status: "accepted", response })
export const reject = (response: unknown): Decision => ({ status: "rejected", response })

export interface MutationOutcome {
  /** `First`: `decide` ran and its outcome was stored. `Replay`: the stored outcome. */
  readonly _tag: "First" | "Replay"
  readonly status: MutationStatus
  /** The response as stored (JSON: parsed back, so a replay and the first answer are equal). */
  readonly response: unknown
  /** When the outcome was recorded (database clock), ISO-8601 UTC with microseconds. */
  readonly recordedAt: string
}

export interface ExecuteOptions {
  /**
   * `false`: when another request of this identity is in flight, fail with
   * `MutationInProgress` at once instead of waiting for it (HTTP 409 in the
   * Idempotency-Key draft). Default `true`.
   */
  readonly wait?: boolean
}

export type ExecuteError = MutationConflict | MutationInProgress | InvalidInput | UnsupportedJsonValue | DatabaseError

export class MutationLedger extends Context.Tag("@effect-durable/pg/MutationLedger")<MutationLedger, {
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
   * Deletes records older than `olderThan` (at least `PURGE_FLOOR`: a retried request whose
   * record is gone runs its effect again), `batchSize` at a time; returns how many.
   */
  readonly purge: (options: PurgeOptions) => Effect.Effect<number, DatabaseError | InvalidInput>
}>() {}

export interface PurgeOptions {
  readonly olderThan: Duration.DurationInput
  /** Records per DELETE; default 1000. */
  readonly batchSize?: number
}

/** Retention floor of `purge`: records younger than this are never deleted. */
export const PURGE_FLOOR = "1 hour"

const Bytes = (rule: string, valid: (bytes: Uint8Array) => boolean) =>
  Schema.Uint8ArrayFromSelf.pipe(Schema.filter(valid, { message: () => rule }))

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
  Effect.zipRight(decodeIdentity(identity), decodeRequest(request))

const RecordRow = Schema.Struct({
  kind: Schema.String,
  eligibility: Schema.Uint8ArrayFromSelf,
  request_fingerprint: Schema.Uint8ArrayFromSelf,
  status: Schema.Literal("accepted", "rejected"),
  response: Schema.Unknown,
  recorded_at: Schema.String
})
type RecordRow = typeof RecordRow.Type
const decodeRecord = Schema.decodeUnknown(Schema.Array(RecordRow))

const sameBytes = (a: Uint8Array, b: Uint8Array) => Buffer.from(a).equals(Buffer.from(b))

export const make: Effect.Effect<MutationLedger["Type"], never, SqlClient.SqlClient | DurableSettings> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const records = sql.literal(settings.table("mutation_records"))

    const replayOrConflict = (identity: MutationIdentity, request: MutationRequest, row: RecordRow) => {
      const differences = [
        ...(row.kind === request.kind ? [] : ["kind" as const]),
        ...(sameBytes(row.eligibility, request.eligibility) ? [] : ["eligibility" as const]),
        ...(sameBytes(row.request_fingerprint, request.fingerprint) ? [] : ["fingerprint" as const])
      ]
      return differences.length === 0
        ? Effect.succeed<MutationOutcome>({
          _tag: "Replay",
          status: row.status,
          response: row.response,
          recordedAt: row.recorded_at
        })
        : Effect.fail(new MutationConflict({ ...identity, differences }))
    }

    const execute = <E, R>(
      identity: MutationIdentity,
      request: MutationRequest,
      decide: Effect.Effect<Decision, E, R>,
      options: ExecuteOptions = {}
    ): Effect.Effect<MutationOutcome, E | ExecuteError, R> =>
      Effect.zipRight(
        validate(identity, request),
        transact(
          sql,
          "MutationLedger.execute",
          Effect.gen(function*() {
            const { key, operation, subject } = identity
            const lockKey = advisoryKey("effect-durable/ledger", settings.schema, subject, operation, key)
            const read = (forUpdate: boolean) =>
              sql<RecordRow>`
                SELECT kind, eligibility, request_fingerprint, status, response, ${sql.literal(isoUtc("created_at"))} AS recorded_at
                  FROM ${records}
                 WHERE subject = ${subject} AND operation = ${operation} AND key = ${key}
                 ${forUpdate ? sql`FOR UPDATE` : sql``}`
            const [locked, existing] = yield* (options.wait === false
              ? Effect.gen(function*() {
                const locked = yield* lockForTransaction(sql, settings, lockKey, false)
                // Without the lock read what is committed; never queue on the row.
                return [locked, yield* read(locked)] as const
              })
              // Waiting for the lock, the lock and the read go as one simple-protocol query, one
              // round trip: each statement in it takes its own snapshot, so the read sees what a
              // first request that held the lock committed.
              : Effect.map(
                sql.unsafe<never>(`${inline(lockStatement(sql, settings, lockKey, true))};\n${inline(read(true))}`),
                (results) => [true, (results as unknown as [unknown, ReadonlyArray<RecordRow>])[1]] as const
              )).pipe(classifySqlErrors("MutationLedger.execute"))
            const [record] = yield* Effect.orDie(decodeRecord(existing))
            if (record !== undefined) return yield* replayOrConflict(identity, request, record)
            if (!locked) return yield* new MutationInProgress(identity)
            const decision = yield* decide
            const response = yield* canonicalize(decision.response)
            const inserted = yield* sql<{ recorded_at: string }>`
              INSERT INTO ${records} (subject, operation, key, kind, eligibility, request_fingerprint, status, response)
              VALUES (${subject}, ${operation}, ${key}, ${request.kind}, ${request.eligibility},
                      ${request.fingerprint}, ${decision.status}, ${response}::jsonb)
              RETURNING ${sql.literal(isoUtc("created_at"))} AS recorded_at`.pipe(classifySqlErrors("MutationLedger.execute"))
            return {
              _tag: "First",
              status: decision.status,
              response: JSON.parse(response),
              recordedAt: inserted[0]!.recorded_at
            } satisfies MutationOutcome
          })
        )
      )

    const purge = (options: PurgeOptions) =>
      Effect.gen(function*() {
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

    return MutationLedger.of(traced("MutationLedger", { execute, purge }))
  }
)

/** The ledger over your own `SqlClient` and settings. */
export const layer: Layer.Layer<MutationLedger, never, SqlClient.SqlClient | DurableSettings> = Layer.effect(
  MutationLedger,
  make
)
