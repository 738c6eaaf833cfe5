/**
 * Every operation of a service gets its span here, by construction: `traced("Outbox", impl)`
 * wraps each method (and each effect-valued member) in a span named `Outbox.<member>`, so no
 * operation can be left untraced. Spans carry no arguments: subjects, keys and payloads are
 * request data and never go into telemetry.
 */
import * as Effect from "effect/Effect"

export const traced = <S extends object>(service: string, implementation: S): S => {
  const wrapped: Record<string, unknown> = {}
  for (const [member, value] of Object.entries(implementation)) {
    const name = `${service}.${member}`
    wrapped[member] = typeof value === "function"
      ? (...args: Array<unknown>) => {
        const result = (value as (...args: Array<unknown>) => unknown)(...args)
        return Effect.isEffect(result) ? Effect.withSpan(result, name, { captureStackTrace: false }) : result
      }
      : Effect.isEffect(value)
      ? Effect.withSpan(value, name, { captureStackTrace: false })
      : value
  }
  return wrapped as S
}
