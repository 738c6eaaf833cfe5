/**
 * Every expected failure of effect-durable, in one module. Each error carries the data a
 * caller needs to act on it and lives in the error channel; none is ever thrown.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"

/** A value that JSON cannot carry faithfully (RFC 8785 canonicalization refused it). */
export class UnsupportedJsonValue extends Schema.TaggedError<UnsupportedJsonValue>(
  "@effect-durable/UnsupportedJsonValue"
)("UnsupportedJsonValue", {
  /** JSONPath of the offending value, e.g. `$.items[2].price`. */
  path: Schema.String,
  /** What the value was and why JSON cannot carry it. */
  reason: Schema.String
}) {
  override get message() {
    return `value at ${this.path} is not JSON: ${this.reason}`
  }
}

/** Configuration or input that breaks a named rule; nothing was written. */
export class DurableConfigError extends Schema.TaggedError<DurableConfigError>(
  "@effect-durable/DurableConfigError"
)("DurableConfigError", {
  /** The configuration field or input name, e.g. `schema` or `cursor.keys[0].secret`. */
  field: Schema.String,
  /** The rule the value broke. */
  rule: Schema.String
}) {
  override get message() {
    return `invalid ${this.field}: ${this.rule}`
  }
}

/**
 * An argument of a call that breaks a named rule (a negative duration, a NUL character, an
 * empty subject...). Nothing was written and the caller's transaction is still usable.
 */
export class InvalidInput extends Schema.TaggedError<InvalidInput>("@effect-durable/InvalidInput")("InvalidInput", {
  /** The argument, with the path inside it: `olderThan`, `claims[3].generation`. */
  argument: Schema.String,
  /** The rule the value broke. */
  rule: Schema.String
}) {
  override get message() {
    return `invalid ${this.argument}: ${this.rule}`
  }
}

/**
 * The database's substrate schema is not the one this code was built for: older (run the
 * migrations) or newer (a deploy was rolled back). Raised when the layer is built, before
 * any request is served.
 */
export class SchemaVersionMismatch
  extends Schema.TaggedError<SchemaVersionMismatch>("@effect-durable/SchemaVersionMismatch")(
    "SchemaVersionMismatch",
    {
      schema: Schema.String,
      /** The latest version recorded in the database (0: never migrated). */
      found: Schema.Number,
      /** The version this code needs. */
      needed: Schema.Number,
      /** The versions applied from other DDL than this code's (their checksums differ). */
      changed: Schema.optional(Schema.Array(Schema.Struct({ version: Schema.Number, name: Schema.String }))),
      /** The schema was built by the pre-release numbering (`found` counts in it). */
      prerelease: Schema.optional(Schema.Boolean),
      /** What else the database and the code disagree on. */
      detail: Schema.optional(Schema.String)
    }
  )
{
  override get message() {
    const detail = this.detail === undefined ? "" : ` (${this.detail})`
    if (this.changed !== undefined && this.changed.length > 0) {
      const versions = this.changed.map((v) => `${v.version} (${v.name})`).join(", ")
      return `the "${this.schema}" schema applied version ${versions} from other DDL than this code's: an unreleased ` +
        `version changed since it was applied, or the schema was edited by hand. Recreate a development ` +
        `database; otherwise deploy the release that migrated it${detail}`
    }
    if (this.prerelease === true) {
      return `the "${this.schema}" schema was built by a pre-release of effect-durable (version ${this.found} of the ` +
        `numbering before the first release): run the migrations once to adopt it as the baseline ` +
        `(Durable.layer({ migrate: true }), or \`effect-durable migrate\`)${detail}`
    }
    return this.found < this.needed
      ? `the "${this.schema}" schema is at version ${this.found}, this code needs ${this.needed}: run the migrations ` +
        `(Durable.layer({ migrate: true }), or \`effect-durable migrate\` as a deploy step)`
      : `the "${this.schema}" schema is at version ${this.found}, newer than this code knows (${this.needed}): ` +
        `a newer release migrated it; deploy that release (or newer) instead of this one`
  }
}

/** A retried mutation differs from the recorded one (kind, eligibility claim or fingerprint). */
export class MutationConflict extends Schema.TaggedError<MutationConflict>(
  "@effect-durable/MutationConflict"
)("MutationConflict", {
  subject: Schema.String,
  operation: Schema.String,
  key: Schema.String,
  /** Which parts differ from the stored record. */
  differences: Schema.Array(Schema.Literals(["kind", "eligibility", "fingerprint"]))
}) {
  override get message() {
    return `mutation ${this.operation}/${this.key} conflicts with its record (${this.differences.join(", ")} differ)`
  }
}

/**
 * The first request of this identity is still in flight (no-wait mode). Answer like the
 * IETF Idempotency-Key draft does (409) and let the client retry later.
 */
export class MutationInProgress extends Schema.TaggedError<MutationInProgress>(
  "@effect-durable/MutationInProgress"
)("MutationInProgress", {
  subject: Schema.String,
  operation: Schema.String,
  key: Schema.String
}) {
  override get message() {
    return `mutation ${this.operation}/${this.key} is in progress`
  }
}

/** A compare-and-swap found another revision than the expected one (or no row). */
export class CasConflict extends Schema.TaggedError<CasConflict>("@effect-durable/CasConflict")(
  "CasConflict",
  {
    table: Schema.String,
    id: Schema.String,
    expectedRevision: Schema.BigInt,
    /** The revision found, or `null` when the row does not exist. */
    actualRevision: Schema.NullOr(Schema.BigInt)
  }
) {
  override get message() {
    return `${this.table} ${this.id}: expected revision ${this.expectedRevision}, found ${
      this.actualRevision === null ? "no row" : this.actualRevision
    }`
  }
}

/** Which leased queue a message lives in. */
export const QueueName = Schema.Literals(["outbox", "inbox"])
export type QueueName = typeof QueueName.Type

/**
 * A claim token is stale or foreign: the row was claimed again after this worker's lease
 * ran out, is held by another worker, or was cancelled (`cancelled`: the holder should stop
 * its delivery, not only skip its write). The same shape for the outbox and the inbox.
 */
export class ClaimMismatch extends Schema.TaggedError<ClaimMismatch>("@effect-durable/ClaimMismatch")(
  "ClaimMismatch",
  {
    queue: QueueName,
    messageId: Schema.String,
    worker: Schema.String,
    generation: Schema.Number,
    cancelled: Schema.optionalKey(Schema.Boolean)
  }
) {
  override get message() {
    return `${this.queue} message ${this.messageId} is not claimed by ${this.worker} at generation ${this.generation}${
      this.cancelled === true ? ": it was cancelled" : ""
    }`
  }
}

/** No row of this queue has this id. */
export class MessageMissing extends Schema.TaggedError<MessageMissing>("@effect-durable/MessageMissing")(
  "MessageMissing",
  { queue: QueueName, messageId: Schema.String }
) {
  override get message() {
    return `no ${this.queue} message ${this.messageId}`
  }
}

/** No feed consumer has this name (`Feed.register` makes one). */
export class FeedConsumerMissing extends Schema.TaggedError<FeedConsumerMissing>(
  "@effect-durable/FeedConsumerMissing"
)("FeedConsumerMissing", { consumer: Schema.String }) {
  override get message() {
    return `no feed consumer ${JSON.stringify(this.consumer)}: Feed.register makes one`
  }
}

/**
 * A feed consumer's cursor moved under a batch (an operator reset it while the batch was being
 * applied): the batch was rolled back, nothing it wrote stays.
 */
export class FeedCursorMoved extends Schema.TaggedError<FeedCursorMoved>("@effect-durable/FeedCursorMoved")(
  "FeedCursorMoved",
  { consumer: Schema.String }
) {
  override get message() {
    return `feed consumer ${
      JSON.stringify(this.consumer)
    } was moved while a batch was applied; the batch was rolled back`
  }
}

/**
 * The outbox's relay over logical decoding cannot run on this server: `wal_level` is not
 * `logical`, the role may not replicate, or the server is older than PostgreSQL 15.
 */
export class LogicalDecodingUnavailable extends Schema.TaggedError<LogicalDecodingUnavailable>(
  "@effect-durable/LogicalDecodingUnavailable"
)("LogicalDecodingUnavailable", { slot: Schema.String, rule: Schema.String }) {
  override get message() {
    return `the relay's slot ${JSON.stringify(this.slot)} cannot decode the outbox: ${this.rule}`
  }
}

/**
 * The relay's replication slot lost the WAL it needed (`max_slot_wal_keep_size` was passed while
 * the relay was away). Nothing is lost: the messages it had not relayed are still open in the
 * outbox; `OutboxLog.drop` and a new start publish them from the table.
 */
export class RelaySlotLost extends Schema.TaggedError<RelaySlotLost>("@effect-durable/RelaySlotLost")(
  "RelaySlotLost",
  { slot: Schema.String }
) {
  override get message() {
    return `the relay's slot ${
      JSON.stringify(this.slot)
    } lost its WAL (max_slot_wal_keep_size); drop it and start again: the open messages are published from the table`
  }
}

/** A message payload larger than the configured limit; nothing was written. */
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>("@effect-durable/PayloadTooLarge")(
  "PayloadTooLarge",
  { topic: Schema.String, bytes: Schema.Number, limit: Schema.Number }
) {
  override get message() {
    return `payload for ${this.topic} is ${this.bytes} bytes; the limit is ${this.limit}`
  }
}

/** A cursor that was tampered with, truncated, re-encoded, or signed by an unknown key. */
export class InvalidCursor extends Schema.TaggedError<InvalidCursor>("@effect-durable/InvalidCursor")(
  "InvalidCursor",
  { reason: Schema.String }
) {
  override get message() {
    return `invalid cursor: ${this.reason}`
  }
}

/** A valid cursor used for another subject or other filters than it was issued for. */
export class CursorBindingMismatch extends Schema.TaggedError<CursorBindingMismatch>(
  "@effect-durable/CursorBindingMismatch"
)("CursorBindingMismatch", { field: Schema.Literals(["subject", "filter"]) }) {
  override get message() {
    return `cursor was issued for another ${this.field}`
  }
}

/**
 * A PostgreSQL failure, classified once: `retryable` says whether running the same
 * transaction again can succeed (serialization failure, deadlock, lock or statement
 * timeout, shutdown, lost connection).
 */
export class DatabaseError extends Schema.TaggedError<DatabaseError>("@effect-durable/DatabaseError")(
  "DatabaseError",
  {
    /** SQLSTATE, when the server sent one. */
    code: Schema.NullOr(Schema.String),
    retryable: Schema.Boolean,
    operation: Schema.String,
    detail: Schema.String,
    /** The driver's own error, for logs and debugging (never shown in `message`). */
    cause: Schema.optional(Schema.Unknown)
  }
) {
  override get message() {
    return `${this.operation} failed${this.code === null ? "" : ` [${this.code}]`}${
      this.retryable ? " (retryable)" : ""
    }: ${this.detail}`
  }
}
