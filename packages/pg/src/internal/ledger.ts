/**
 * The mutation ledger's storage: the one-call lookup (timeouts, advisory lock, record), the
 * insert of an outcome, and the mapping between stored rows and outcomes. A record replays the
 * bytes it stored, exactly: JSON text in the key order it was given, or a raw body (HTTP).
 */
import { type DatabaseError, PayloadTooLarge, type UnsupportedJsonValue } from "@effect-durable/core/Errors"
import { canonicalizeWithin } from "@effect-durable/core/Fingerprint"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type * as SqlClient from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import type { Settings } from "../DurableConfig.js"
import type { Decision, MutationIdentity, MutationOutcome, MutationRequest, StoredMutation } from "../MutationLedger.js"
import { isoUtc } from "./timestamps.js"
import { advisoryKey, timeoutValues } from "./transaction.js"

/** Largest stored response, in bytes (the JSON text, or a raw body). */
export const MAX_RESPONSE_BYTES = 4 * 1024 * 1024

const Lookup = Schema.Struct({
  locked: Schema.Boolean,
  previous_lock_timeout: Schema.String,
  previous_statement_timeout: Schema.String,
  kind: Schema.NullOr(Schema.String),
  eligibility: Schema.NullOr(Schema.Uint8Array),
  request_fingerprint: Schema.NullOr(Schema.Uint8Array),
  status: Schema.NullOr(Schema.Literals(["accepted", "rejected"])),
  response: Schema.Unknown,
  response_body: Schema.NullOr(Schema.Uint8Array),
  response_meta: Schema.Unknown,
  recorded_at: Schema.NullOr(Schema.String)
})
export type Lookup = typeof Lookup.Type
export const decodeLookup = Schema.decodeUnknownEffect(Lookup)

/** A raw body's meta is stored wrapped, so that a record says which kind of response it holds. */
interface BytesMeta {
  readonly format: "bytes"
  readonly meta: unknown
}
const isBytesMeta = (value: unknown): value is BytesMeta =>
  typeof value === "object" && value !== null && (value as BytesMeta).format === "bytes"

const utf8 = new TextEncoder()

/** What a stored row holds, as the caller sees it (a replay, or `lookup`). */
export const storedOf = (row: Lookup): StoredMutation => {
  const bytes = isBytesMeta(row.response_meta)
  // Records made before exact responses keep only their jsonb (its key order is PostgreSQL's).
  // A plain Uint8Array (not the driver's Buffer), like the body of a first outcome.
  const body = row.response_body === null
    ? utf8.encode(JSON.stringify(row.response))
    : new Uint8Array(row.response_body)
  return {
    kind: row.kind!,
    status: row.status!,
    response: bytes ? null : row.response_body === null ? row.response : JSON.parse(Buffer.from(body).toString("utf8")),
    body,
    meta: bytes ? (row.response_meta as BytesMeta).meta : null,
    fingerprint: row.request_fingerprint!,
    eligibility: row.eligibility!,
    recordedAt: row.recorded_at!
  }
}

const sameBytes = (a: Uint8Array, b: Uint8Array) => Buffer.from(a).equals(Buffer.from(b))

/** What differs between a stored record and a new request of its identity (empty: an exact repeat). */
export const differences = (stored: StoredMutation, request: MutationRequest) => [
  ...(stored.kind === request.kind ? [] : ["kind" as const]),
  ...(sameBytes(stored.eligibility, request.eligibility) ? [] : ["eligibility" as const]),
  ...(sameBytes(stored.fingerprint, request.fingerprint) ? [] : ["fingerprint" as const])
]

/** The outcome a decision becomes, with what is stored for it; refused when JSON cannot carry it or it is too big. */
export const encodeDecision = (
  identity: MutationIdentity,
  decision: Decision
): Result.Result<
  { readonly body: Uint8Array; readonly meta: unknown; readonly response: unknown },
  UnsupportedJsonValue | PayloadTooLarge
> => {
  const tooLarge = (bytes: number) =>
    new PayloadTooLarge({ topic: identity.operation, bytes, limit: MAX_RESPONSE_BYTES })
  if (decision._tag === "Bytes") {
    if (decision.body.length > MAX_RESPONSE_BYTES) return Result.fail(tooLarge(decision.body.length))
    return Result.map(canonicalizeWithin(decision.meta, 64 * 1024), () => ({
      body: decision.body,
      meta: { format: "bytes", meta: decision.meta } satisfies BytesMeta,
      response: null
    }))
  }
  return Result.map(
    Result.mapError(
      canonicalizeWithin(decision.response, MAX_RESPONSE_BYTES),
      (error) => error._tag === "PayloadTooLarge" ? tooLarge(error.bytes) : error
    ),
    // Validated by the canonical walk; stored as given, so its key order is replayed.
    () => ({ body: utf8.encode(JSON.stringify(decision.response)), meta: null, response: decision.response })
  )
}

export const make = (sql: SqlClient.SqlClient, settings: Settings) => {
  const records = sql.literal(settings.table("mutation_records"))
  const lookupFunction = sql.literal(settings.table("mutation_lookup"))
  const timeouts = timeoutValues(settings)

  /**
   * Sets the timeouts, takes (or tries, `wait: false`) the identity's advisory lock and reads
   * its record, in one parameterized call: no request data is ever inlined into SQL text.
   */
  const lookup = (identity: MutationIdentity, wait: boolean): Effect.Effect<Lookup, SqlError> => {
    const { key, operation, subject } = identity
    const lockKey = advisoryKey("effect-durable/ledger", settings.schema, subject, operation, key)
    return Effect.flatMap(
      sql`SELECT * FROM ${lookupFunction}(${subject}, ${operation}, ${key}, ${lockKey.toString()}::bigint, ${wait},
                                          ${timeouts.lockTimeout}, ${timeouts.statementTimeout}::text)`,
      (rows) => Effect.orDie(decodeLookup(rows[0]))
    )
  }

  /** Stores an outcome; returns when it was recorded. */
  const insert = (
    identity: MutationIdentity,
    request: MutationRequest,
    status: Decision["status"],
    stored: { readonly body: Uint8Array; readonly meta: unknown }
  ): Effect.Effect<string, SqlError | DatabaseError> =>
    Effect.map(
      sql<{ recorded_at: string }>`
        INSERT INTO ${records} (subject, operation, key, kind, eligibility, request_fingerprint, status, response_body, response_meta)
        VALUES (${identity.subject}, ${identity.operation}, ${identity.key}, ${request.kind}, ${request.eligibility},
                ${request.fingerprint}, ${status}, ${stored.body}, ${
        stored.meta === null ? null : JSON.stringify(stored.meta)
      }::jsonb)
        RETURNING ${sql.literal(isoUtc("created_at"))} AS recorded_at`,
      (rows) => rows[0]!.recorded_at
    )

  /** The outcome of a replayed record. */
  const replayOf = (stored: StoredMutation): MutationOutcome => ({
    _tag: "Replay",
    status: stored.status,
    response: stored.response,
    body: stored.body,
    meta: stored.meta,
    recordedAt: stored.recordedAt
  })

  return { lookup, insert, replayOf }
}
