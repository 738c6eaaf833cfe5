import * as Cursor from "@effect-durable/core/Cursor"
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import { describe, expect, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as TestClock from "effect/testing/TestClock"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as FastCheck from "fast-check"
import * as DeferredTokens from "../src/DeferredTokens.js"

const key = (id: string) => ({ id, secret: Redacted.make(`${id}-a-secret-of-32-bytes-or-so!!`) })
const tokens = (...keys: [ReturnType<typeof key>, ...Array<ReturnType<typeof key>>]) =>
  Effect.runSync(DeferredTokens.make(keys))

const upstream = DurableDeferred.TokenParsed.make({
  workflowName: "Order",
  executionId: "exec-7",
  deferredName: "approval"
}).asToken

const reasonOf = (service: DeferredTokens.DeferredTokens["Service"], signed: string) =>
  Effect.runSync(Effect.flip(service.open(signed))).reason

describe("DeferredTokens", () => {
  it("opens what it signed: the upstream token and what it names", () => {
    const service = tokens(key("k1"))
    const signed = Effect.runSync(service.sign(upstream))
    expect(signed).toMatch(/^[A-Za-z0-9_-]+$/)
    expect(Effect.runSync(service.open(signed))).toEqual({
      token: upstream,
      workflowName: "Order",
      executionId: "exec-7",
      deferredName: "approval",
      expiresAt: undefined
    })
  })

  it("a rotated keyring still opens tokens the old key signed; a keyring without that key does not", () => {
    const old = tokens(key("k1"))
    const signed = Effect.runSync(old.sign(upstream))
    expect(Effect.runSync(tokens(key("k2"), key("k1")).open(signed)).executionId).toBe("exec-7")
    expect(reasonOf(tokens(key("k2")), signed)).toMatch(/key/)
  })

  it("refuses every altered token, the unsigned upstream token and a cursor signed with the same keys", () => {
    const service = tokens(key("k1"))
    const signed = Effect.runSync(service.sign(upstream))
    FastCheck.assert(
      FastCheck.property(FastCheck.nat({ max: signed.length - 1 }), FastCheck.nat({ max: 63 }), (at, to) => {
        const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        const replacement = alphabet[to]!
        FastCheck.pre(signed[at] !== replacement)
        const altered = signed.slice(0, at) + replacement + signed.slice(at + 1)
        expect(Effect.runSync(Effect.result(service.open(altered)))._tag).toBe("Failure")
      })
    )
    expect(Effect.runSync(Effect.result(service.open(upstream)))._tag).toBe("Failure")

    const cursors = Effect.runSync(Cursor.make([key("k1")]))
    const cursor = Effect.runSync(
      cursors.encode(
        Cursor.firstPage("t", Fingerprint.fingerprintOfCanonical("{}"), { value: "1", tieBreaker: "1" })
      )
    )
    expect(reasonOf(service, cursor)).toBe("not a token of this kind or version (its first byte is 1)")
    expect(reasonOf(service, "x".repeat(DeferredTokens.MAX_TOKEN_LENGTH + 1))).toMatch(/long/)
  })

  it.effect("expires on the clock it was signed by", () =>
    Effect.gen(function*() {
      const service = tokens(key("k1"))
      const signed = yield* service.sign(upstream, { expiresIn: "1 hour" })
      const opened = yield* service.open(signed)
      expect(opened.expiresAt).toBe(3_600_000)
      yield* TestClock.adjust("59 minutes")
      expect((yield* service.open(signed)).executionId).toBe("exec-7")
      yield* TestClock.adjust("1 minute")
      expect((yield* Effect.flip(service.open(signed))).reason).toBe("expired")
    }))

  it("refuses bad input with the rule it broke: not a token, a negative or NaN expiry, a bad keyring", () => {
    const service = tokens(key("k1"))
    const notAToken = Effect.runSync(Effect.flip(service.sign("not base64 json" as DurableDeferred.Token)))
    expect(notAToken).toMatchObject({ _tag: "InvalidInput", argument: "token" })
    for (const expiresIn of [-1, Number.NaN] as const) {
      const error = Effect.runSync(Effect.flip(service.sign(upstream, { expiresIn })))
      expect(error).toMatchObject({ _tag: "InvalidInput", argument: "expiresIn" })
    }
    const short = Effect.runSync(Effect.flip(DeferredTokens.make([{ id: "k", secret: Redacted.make("short") }])))
    expect(short).toMatchObject({ _tag: "DurableConfigError", field: "deferredTokens.keys[0].secret" })
  })

  it("H19: DEFERRED_TOKEN_KEYS is read without the whitespace around each entry; a blank or padded secret is refused", () => {
    const fromEnv = (value: string) =>
      Effect.runSync(
        Effect.flip(Effect.flatMap(DeferredTokens.keyringConfig, DeferredTokens.make)).pipe(
          Effect.provide(ConfigProvider.layer(ConfigProvider.fromUnknown({ DEFERRED_TOKEN_KEYS: value }))),
          Effect.map((error) => error as unknown),
          Effect.orElseSucceed(() => undefined)
        )
      )
    const read = (value: string) =>
      Effect.runSync(
        Effect.flatMap(DeferredTokens.keyringConfig, DeferredTokens.make).pipe(
          Effect.provide(ConfigProvider.layer(ConfigProvider.fromUnknown({ DEFERRED_TOKEN_KEYS: value })))
        )
      )
    // A file's trailing newline and a space after the comma are not part of the secrets.
    const service = read("k2=k2-a-secret-of-32-bytes-or-so!!\n, k1=k1-a-secret-of-32-bytes-or-so!! \n")
    const signed = Effect.runSync(service.sign(upstream))
    expect(Effect.runSync(tokens(key("k2")).open(signed)).executionId).toBe("exec-7")
    expect(Effect.runSync(service.open(Effect.runSync(tokens(key("k1")).sign(upstream)))).executionId).toBe("exec-7")
    // Sixteen spaces are no key, from the environment or from code.
    expect(fromEnv("k1=" + " ".repeat(16))).toMatchObject({ _tag: "DurableConfigError" })
    const padded = Effect.runSync(
      Effect.flip(DeferredTokens.make([{ id: "k", secret: Redacted.make(" a-secret-of-more-than-16-bytes") }]))
    )
    expect(padded).toMatchObject({ _tag: "DurableConfigError", field: "deferredTokens.keys[0].secret" })
  })
})
