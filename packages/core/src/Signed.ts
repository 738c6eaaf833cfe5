/**
 * Signed tokens: a canonical-JSON payload HMAC-SHA256 signed with the newest key of a keyring
 * and verified against every listed key (keys rotate without breaking tokens in flight). The
 * frame is `[purpose, key id length, key id, payload, MAC]` in base64url without padding;
 * the purpose byte is signed, so a token issued for one use (a keyset cursor, a deferred
 * token) never opens as another even under the same keys. Only the canonical encoding opens.
 * `Cursor` and `@effect-durable/workflow`'s deferred tokens are built on it.
 *
 * @since 0.2.0
 */
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import { createHmac, timingSafeEqual } from "node:crypto"
import { DurableConfigError } from "./Errors.js"
import { canonicalizeResult } from "./Fingerprint.js"

/** One signing key. Secrets are at least 16 bytes. */
export interface Key {
  /** 1–32 characters of `[A-Za-z0-9_-]`, stored in every token it signs. */
  readonly id: string
  readonly secret: Redacted.Redacted<string>
}

/** Signing keys, newest first: the first signs, all verify. */
export type Keyring = readonly [Key, ...Array<Key>]

export const MAC_BYTES = 32
export const MAX_KEY_ID_LENGTH = 32
export const MIN_SECRET_BYTES = 16
const KEY_ID = new RegExp(`^[A-Za-z0-9_-]{1,${MAX_KEY_ID_LENGTH}}$`)

/** A token's bytes besides its payload, for the longest key id. */
export const FRAME_BYTES = 2 + MAX_KEY_ID_LENGTH + MAC_BYTES

/** Checks a keyring; `field` names it in the error (`cursor.keys`). */
export const validateKeyring = (
  keys: ReadonlyArray<Key>,
  field: string
): Result.Result<void, DurableConfigError> => {
  if (!Array.isArray(keys) || keys.length === 0) {
    return Result.fail(new DurableConfigError({ field, rule: "a list of at least one key { id, secret }" }))
  }
  const seen = new Set<string>()
  for (const [i, key] of keys.entries()) {
    if (typeof key !== "object" || key === null || !Redacted.isRedacted(key.secret)) {
      return Result.fail(new DurableConfigError({ field: `${field}[${i}]`, rule: "{ id, secret: Redacted }" }))
    }
    if (typeof key.id !== "string" || !KEY_ID.test(key.id)) {
      return Result.fail(
        new DurableConfigError({ field: `${field}[${i}].id`, rule: "1-32 characters of A-Z a-z 0-9 _ -" })
      )
    }
    if (seen.has(key.id)) {
      return Result.fail(
        new DurableConfigError({ field: `${field}[${i}].id`, rule: `key id ${key.id} is listed twice` })
      )
    }
    seen.add(key.id)
    const secret: unknown = Redacted.value(key.secret)
    // Whitespace around a secret is a file's trailing newline or a pasted space, never key
    // material: it would sign with bytes nobody meant (and sixteen spaces would pass as a key).
    if (
      typeof secret !== "string" || secret.trim() !== secret || Buffer.byteLength(secret, "utf8") < MIN_SECRET_BYTES
    ) {
      return Result.fail(
        new DurableConfigError({
          field: `${field}[${i}].secret`,
          rule: `at least ${MIN_SECRET_BYTES} bytes, without whitespace at either end`
        })
      )
    }
  }
  return Result.void
}

export interface Signer {
  /** Signs canonical JSON text (the caller canonicalizes it) with the newest key. */
  readonly sign: (payload: string) => string
  /**
   * Opens a token: its parsed payload when it is canonical base64url of this purpose, signed by
   * a listed key, and carries canonical JSON; otherwise why not, in a few words.
   */
  readonly open: (token: string, maxLength: number) => Result.Result<unknown, string>
}

/** A signer over a keyring checked by `validateKeyring`, for tokens of `purpose` (1-255). */
export const makeSigner = (keys: Keyring, purpose: number): Signer => {
  const secrets = new Map(keys.map((key) => [key.id, Buffer.from(Redacted.value(key.secret), "utf8")] as const))
  const signer = keys[0]
  const mac = (secret: Buffer, signed: Buffer) => createHmac("sha256", secret).update(signed).digest()

  const sign = (payload: string): string => {
    const kid = Buffer.from(signer.id, "ascii")
    const signed = Buffer.concat([Buffer.from([purpose, kid.length]), kid, Buffer.from(payload, "utf8")])
    return Buffer.concat([signed, mac(secrets.get(signer.id)!, signed)]).toString("base64url")
  }

  const open = (token: string, maxLength: number): Result.Result<unknown, string> => {
    if (typeof token !== "string" || token.length === 0) return Result.fail("empty")
    if (token.length > maxLength) return Result.fail(`longer than ${maxLength} characters`)
    if (!/^[A-Za-z0-9_-]+$/.test(token)) return Result.fail("not base64url without padding")
    const bytes = Buffer.from(token, "base64url")
    // Several strings decode to the same bytes (unused trailing bits); accept only the one we emit.
    if (bytes.toString("base64url") !== token) return Result.fail("not the canonical base64url encoding")
    if (bytes.length < 2 + MAC_BYTES + 1) return Result.fail("truncated")
    if (bytes[0] !== purpose) return Result.fail(`not a token of this kind or version (its first byte is ${bytes[0]})`)
    const kidLength = bytes[1]!
    const payloadStart = 2 + kidLength
    const macStart = bytes.length - MAC_BYTES
    if (kidLength === 0 || payloadStart >= macStart) return Result.fail("truncated")
    const kid = bytes.subarray(2, payloadStart).toString("latin1")
    const secret = KEY_ID.test(kid) ? secrets.get(kid) : undefined
    if (secret === undefined) return Result.fail("signed by an unknown key")
    const expected = mac(secret, bytes.subarray(0, macStart))
    const given = bytes.subarray(macStart)
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return Result.fail("signature mismatch")
    // Authentic from here on: we signed these bytes, but check them as if we had not.
    const text = bytes.subarray(payloadStart, macStart).toString("utf8")
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch {
      return Result.fail("payload is not JSON")
    }
    const canonical = canonicalizeResult(json)
    if (Result.isFailure(canonical) || canonical.success !== text) return Result.fail("payload is not canonical JSON")
    return Result.succeed(json)
  }

  return { sign, open }
}

/**
 * A keyring from configuration: `variable` is a redacted list `id=secret,id=secret`, newest
 * first (prefix it through `Config.nested` for your own naming); `what` names it in the error.
 */
export const keyringConfig = (variable: string, what: string): Config.Config<Keyring> =>
  Config.Redacted(variable).pipe(
    Config.mapEffect((listed) => {
      const keys = Redacted.value(listed).split(",").map((entry) => {
        const at = entry.indexOf("=")
        // Each entry trimmed: `id=secret` read from a file ends in a newline nobody means as key material.
        return {
          id: entry.slice(0, at < 0 ? 0 : at).trim(),
          secret: Redacted.make(at < 0 ? "" : entry.slice(at + 1).trim())
        }
      })
      return keys.length > 0 && keys.every((key) => key.id.length > 0)
        ? Effect.succeed(keys as unknown as Keyring)
        : Effect.fail(
          new Config.ConfigError(
            new Schema.SchemaError(
              new SchemaIssue.Pointer(
                [variable],
                new SchemaIssue.InvalidValue({ message: `${what}, newest first: id=secret[,id=secret...]` })
              )
            )
          )
        )
    })
  )
