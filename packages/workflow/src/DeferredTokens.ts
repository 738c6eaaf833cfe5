/**
 * Signed deferred tokens. `effect/workflow`'s `DurableDeferred.Token` is unsigned base64url
 * JSON of (workflow, execution id, deferred name), and execution ids are derived from
 * idempotency keys: anyone who can guess an order id can forge the token that approves it. A
 * signed token carries the upstream token, HMAC-SHA256 signed with the newest key of a keyring
 * (keys rotate without breaking tokens in flight) and optionally an expiry; only a token this
 * keyring signed, unaltered and unexpired, opens. Hand it to whoever must complete the
 * deferred from outside (an approval link, a payment provider's callback) and complete it
 * through `DeferredCompleter` (or its HTTP route, `@effect-durable/workflow-http`'s
 * `DeferredEndpoint`).
 *
 * @since 0.2.0
 */
import { type DurableConfigError, InvalidInput } from "@effect-durable/core/Errors"
import { canonicalizeResult } from "@effect-durable/core/Fingerprint"
import * as Input from "@effect-durable/core/Input"
import * as Signed from "@effect-durable/core/Signed"
import * as Clock from "effect/Clock"
import type * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as DurableDeferred from "effect/workflow/DurableDeferred"

/** A signed token that does not open: its reason in a few words (never the token). */
export class InvalidDeferredToken
  extends Schema.TaggedError<InvalidDeferredToken>("@effect-durable/workflow/InvalidDeferredToken")(
    "InvalidDeferredToken",
    { reason: Schema.String }
  )
{
  override get message() {
    return `invalid deferred token: ${this.reason}`
  }
}

/** What a signed token names. */
export interface Opened {
  /** The upstream token, for `DurableDeferred.done`. */
  readonly token: DurableDeferred.Token
  readonly workflowName: string
  readonly executionId: string
  readonly deferredName: string
  /** When it stops opening (epoch milliseconds), if it expires. */
  readonly expiresAt: number | undefined
}

export class DeferredTokens extends Context.Service<DeferredTokens, {
  /** Signs an upstream token (`DurableDeferred.token`, `tokenFromExecutionId`), expiring after `expiresIn` when given. */
  readonly sign: (
    token: DurableDeferred.Token,
    options?: { readonly expiresIn?: Duration.Input }
  ) => Effect.Effect<string, InvalidInput>
  /** Opens a signed token: what it names, or why it does not open (tampered, another key, expired). */
  readonly open: (signed: string) => Effect.Effect<Opened, InvalidDeferredToken>
}>()("@effect-durable/workflow/DeferredTokens") {}

/** The signed frame's purpose byte for deferred tokens (cursors are 1): one never opens as the other. */
const PURPOSE = 2
/** Longest signed token accepted, checked before any decoding work. */
export const MAX_TOKEN_LENGTH = 2048

const Payload = Schema.Struct({
  t: Schema.String,
  e: Schema.optionalKey(Schema.Int.check(Schema.isGreaterThan(0)))
})
const decodePayload = Schema.decodeUnknownResult(Payload)
const decodeExpiresIn = Input.argument("expiresIn", Input.DurationIn({ max: "3650 days" }))

/** Builds the service over a keyring; a malformed keyring is a `DurableConfigError`. */
export const make = (keys: Signed.Keyring): Effect.Effect<DeferredTokens["Service"], DurableConfigError> =>
  Effect.map(Effect.fromResult(Signed.validateKeyring(keys, "deferredTokens.keys")), () => {
    const signer = Signed.makeSigner(keys, PURPOSE)
    const invalid = (reason: string) => Effect.fail(new InvalidDeferredToken({ reason }))

    const sign = (token: DurableDeferred.Token, options: { readonly expiresIn?: Duration.Input } = {}) =>
      Effect.gen(function*() {
        const parsed = Result.try(() => DurableDeferred.TokenParsed.fromString(token))
        if (Result.isFailure(parsed)) {
          return yield* new InvalidInput({ argument: "token", rule: "a DurableDeferred token" })
        }
        const expiresAt = options.expiresIn === undefined
          ? undefined
          : (yield* Clock.currentTimeMillis) + Duration.toMillis(yield* decodeExpiresIn(options.expiresIn))
        const text = canonicalizeResult(expiresAt === undefined ? { t: token } : { t: token, e: expiresAt })
        if (Result.isFailure(text)) return yield* new InvalidInput({ argument: "token", rule: text.failure.message })
        const signed = signer.sign(text.success)
        if (signed.length > MAX_TOKEN_LENGTH) {
          return yield* new InvalidInput({
            argument: "token",
            rule: `a signed token of at most ${MAX_TOKEN_LENGTH} characters (this one would have ${signed.length})`
          })
        }
        return signed
      })

    const open = (signed: string) =>
      Effect.gen(function*() {
        const opened = signer.open(signed, MAX_TOKEN_LENGTH)
        if (Result.isFailure(opened)) return yield* invalid(opened.failure)
        const payload = decodePayload(opened.success)
        if (Result.isFailure(payload)) return yield* invalid("payload has the wrong shape")
        const { e: expiresAt, t: token } = payload.success
        if (expiresAt !== undefined && (yield* Clock.currentTimeMillis) >= expiresAt) return yield* invalid("expired")
        const parsed = Result.try(() => DurableDeferred.TokenParsed.fromString(token))
        if (Result.isFailure(parsed)) return yield* invalid("carries no DurableDeferred token")
        return {
          token: token as DurableDeferred.Token,
          workflowName: parsed.success.workflowName,
          executionId: parsed.success.executionId,
          deferredName: parsed.success.deferredName,
          expiresAt
        }
      })

    return DeferredTokens.of({ sign, open })
  })

export const layer = (keys: Signed.Keyring): Layer.Layer<DeferredTokens, DurableConfigError> =>
  Layer.effect(DeferredTokens, make(keys))

/** Keys from configuration: `DEFERRED_TOKEN_KEYS`, a redacted list `id=secret,id=secret`, newest first. */
export const keyringConfig: Config.Config<Signed.Keyring> = Signed.keyringConfig(
  "DEFERRED_TOKEN_KEYS",
  "deferred token signing keys"
)

export const layerConfig = (
  config: Config.Config<Signed.Keyring> = keyringConfig
): Layer.Layer<DeferredTokens, DurableConfigError | Config.ConfigError> =>
  Layer.effect(DeferredTokens, Effect.flatMap(config, make))
