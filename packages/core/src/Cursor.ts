/**
 * Signed keyset cursors. A cursor names a subject, the fingerprint of what it was issued for
 * (table, order, filters), the high-water position recorded by the first page (rows created
 * later never enter the traversal) and the last position served. Tokens are HMAC-SHA256
 * signed with the newest key and verified against every listed key; only the canonical
 * encoding is accepted, and `encode` refuses exactly what `decode` would refuse.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { CursorBindingMismatch, DurableConfigError, InvalidCursor, InvalidInput } from "./Errors.js"
import { canonicalizeResult, type RequestFingerprint, toHex } from "./Fingerprint.js"
import * as Input from "./Input.js"
import * as Signed from "./Signed.js"

/**
 * A row's place in a traversal's order: its order column's value and its tie-breaker's, as
 * text the database casts back to exactly the same values (microseconds kept: a JS Date
 * would drop them).
 */
export interface Position {
  readonly value: string
  readonly tieBreaker: string
}

/** Where a traversal stands. */
export interface Cursor {
  readonly subject: string
  /** Lowercase hex SHA-256 of what the cursor is bound to besides the subject (table, order, filters). */
  readonly filter: string
  /** The position the first page recorded; the traversal never goes past it, so later rows stay out. */
  readonly highWater: Position
  /** The last position served; absent before the first page was read past. */
  readonly after?: Position
}

/** The cursor a first page hands out: bound to its subject and filters, nothing served yet. */
export const firstPage = (subject: string, filter: RequestFingerprint, highWater: Position): Cursor => ({
  subject,
  filter: toHex(filter),
  highWater
})

/** The cursor for the page after the one that ended at `after`. */
export const nextPage = (cursor: Cursor, after: Position): Cursor => ({ ...cursor, after })

/** One signing key. Secrets are at least 16 bytes. */
export type CursorKey = Signed.Key

/** Signing keys, newest first: the first signs, all verify (rotation without breaking pages). */
export type Keyring = Signed.Keyring

export class CursorCodec extends Context.Service<CursorCodec, {
  /**
   * Signs a cursor. A cursor `decode` would refuse (an empty or over-long subject, an over-long
   * position, a token over `MAX_TOKEN_LENGTH`) is refused here, as `InvalidInput`.
   */
  readonly encode: (cursor: Cursor) => Effect.Effect<string, InvalidInput>
  readonly decode: (token: string) => Effect.Effect<Cursor, InvalidCursor>
  /** Decodes and checks the cursor was issued for this subject and these filters. */
  readonly bind: (
    token: string,
    subject: string,
    filter: RequestFingerprint
  ) => Effect.Effect<Cursor, InvalidCursor | CursorBindingMismatch>
}>()("@effect-durable/core/CursorCodec") {}

/**
 * Longest token accepted; checked before any decoding work. It bounds what a client stores and
 * sends back, and it is what `positionCapacity` shares out: large enough that a cursor carries
 * a `varchar(400)` tie-breaker beside a timestamp whatever its characters (a control character
 * takes six bytes in the payload), though a cursor over short values stays a few hundred.
 */
export const MAX_TOKEN_LENGTH = 8192
/** The signed frame's purpose byte for cursors (the wire format's version 1). */
const PURPOSE = 1

/** Longest subject a cursor carries, in UTF-8 bytes (the ledger's subjects are as long). */
export const MAX_SUBJECT_BYTES = 256
/**
 * Most bytes one character of a position takes in a token's payload: JSON writes a control
 * character as `\u00XX`, and no character takes more (a 4-byte UTF-8 character is written as is).
 */
export const MAX_BYTES_PER_CHARACTER = 6

// Canonical JSON refuses a lone surrogate: refusing it in the schema too names the field.
const withoutLoneSurrogates = (schema: Schema.String, rule: string) =>
  schema.check(Schema.makeFilter((text) => !Input.isWellFormed(text) ? `${rule} or lone surrogates` : undefined))

/** What a cursor accepts as its subject: check a subject with it before serving a first page. */
export const Subject: Schema.String = withoutLoneSurrogates(
  Input.Text(MAX_SUBJECT_BYTES),
  `a non-empty string of at most ${MAX_SUBJECT_BYTES} bytes without NUL`
)

// A position part may be empty: '' is a text column's value like any other. Its length is
// bounded by the token's: a part no token can hold is refused by its name first.
const PositionText = withoutLoneSurrogates(
  Input.OptionalText(MAX_TOKEN_LENGTH),
  `a string of at most ${MAX_TOKEN_LENGTH} bytes without NUL`
)
const PositionTuple = Schema.Tuple([PositionText, PositionText])

// Short field names keep tokens short; the schema is the wire format of version 1. The same
// schema checks what `encode` signs and what `decode` accepts: a cursor we issue is one we take.
const Payload = Schema.Struct({
  s: Subject,
  f: Schema.String.check(Schema.isPattern(/^[0-9a-f]{64}$/)),
  h: PositionTuple,
  a: Schema.optionalKey(PositionTuple)
})
const decodePayload = Schema.decodeUnknownResult(Payload)
const checkPayload = Input.argumentResult("cursor", Payload)

const isSubject = Schema.is(Subject)

/**
 * The bytes a cursor for `subject` leaves to one position (its value and tie-breaker as the
 * payload writes them, without quotes): every cursor of that subject whose two positions stay
 * within it fits in `MAX_TOKEN_LENGTH`, whichever listed key signs it. A caller that bounds its
 * positions by this before the first page never meets a page whose cursor cannot be issued.
 * Zero for a subject `Subject` refuses.
 */
export const positionCapacity = (subject: string): number => {
  const empty = ["", ""]
  const frame = canonicalizeResult({ s: subject, f: "0".repeat(64), h: empty, a: empty })
  if (!isSubject(subject) || Result.isFailure(frame)) return 0
  // base64url without padding: 4 characters per 3 bytes.
  const payload = Math.floor(MAX_TOKEN_LENGTH * 3 / 4) - Signed.FRAME_BYTES - Buffer.byteLength(frame.success, "utf8")
  return Math.max(0, Math.floor(payload / 2))
}

/** Builds a codec over a keyring; a malformed keyring is a `DurableConfigError`. */
export const make = (keys: Keyring): Effect.Effect<CursorCodec["Service"], DurableConfigError> =>
  Effect.map(Effect.fromResult(Signed.validateKeyring(keys, "cursor.keys")), () => {
    const { open, sign } = Signed.makeSigner(keys, PURPOSE)

    const encodeResult = (cursor: Cursor): Result.Result<string, InvalidInput> =>
      checkPayload({
        s: cursor.subject,
        f: cursor.filter,
        h: [cursor.highWater.value, cursor.highWater.tieBreaker],
        ...(cursor.after === undefined ? {} : { a: [cursor.after.value, cursor.after.tieBreaker] })
      }).pipe(
        Result.flatMap((checked) =>
          Result.mapError(canonicalizeResult(checked), (error) =>
            new InvalidInput({ argument: "cursor", rule: error.message }))
        ),
        Result.map(sign),
        // `decode` checks the length before anything else: a token it would refuse is never issued.
        Result.filterOrFail(
          (token) =>
            token.length <= MAX_TOKEN_LENGTH,
          (token) =>
            new InvalidInput({
              argument: "cursor",
              rule: `a token of at most ${MAX_TOKEN_LENGTH} characters (this one would have ${token.length})`
            })
        )
      )

    const encode = (cursor: Cursor) => Effect.suspend(() => Effect.fromResult(encodeResult(cursor)))

    const invalid = (reason: string): Result.Result<never, InvalidCursor> => Result.fail(new InvalidCursor({ reason }))

    const decodeResult = (token: string): Result.Result<Cursor, InvalidCursor> => {
      const opened = open(token, MAX_TOKEN_LENGTH)
      if (Result.isFailure(opened)) return invalid(opened.failure)
      const json = opened.success
      return Result.match(decodePayload(json), {
        onFailure: () => invalid("payload has the wrong shape"),
        onSuccess: (payload) =>
          Result.succeed({
            subject: payload.s,
            filter: payload.f,
            highWater: { value: payload.h[0], tieBreaker: payload.h[1] },
            ...(payload.a === undefined ? {} : { after: { value: payload.a[0], tieBreaker: payload.a[1] } })
          })
      })
    }

    const decode = (token: string) => Effect.suspend(() => Effect.fromResult(decodeResult(token)))

    const bind = (token: string, subject: string, filter: RequestFingerprint) =>
      Effect.flatMap(decode(token), (cursor) =>
        cursor.subject !== subject
          ? Effect.fail(new CursorBindingMismatch({ field: "subject" }))
          : cursor.filter !== toHex(filter)
          ? Effect.fail(new CursorBindingMismatch({ field: "filter" }))
          : Effect.succeed(cursor))

    return CursorCodec.of({ encode, decode, bind })
  })

export const layer = (keys: Keyring): Layer.Layer<CursorCodec, DurableConfigError> =>
  Layer.effect(CursorCodec, make(keys))

/**
 * Keys from configuration: `CURSOR_KEYS` is a redacted list `id=secret,id=secret`, newest
 * first (prefix it through `Config.nested` for your own naming).
 */
export const keyringConfig: Config.Config<Keyring> = Signed.keyringConfig("CURSOR_KEYS", "cursor signing keys")

export const layerConfig = (
  config: Config.Config<Keyring> = keyringConfig
): Layer.Layer<CursorCodec, DurableConfigError | Config.ConfigError> =>
  Layer.effect(CursorCodec, Effect.flatMap(config, make))
