/**
 * The two options every queue (the outbox and the inbox) has, declared for either: how large a
 * payload may be and how many failed attempts make a row dead. Each queue names its variables.
 */
import * as Input from "@effect-durable/core/Input"
import * as Options from "@effect-durable/core/Options"

/** The largest payload, as canonical JSON bytes: 256 KiB by default, at most 64 MiB. */
export const maxPayloadBytes = (variable: string, what: string) =>
  Options.option({
    schema: Input.Count(64 * 1024 * 1024),
    default: 256 * 1024,
    variable,
    text: "integer",
    purpose: `the largest ${what} payload, as canonical JSON bytes`,
    example: "262144"
  })

/** Failed attempts before a row is dead: 25 by default, at most 10,000. */
export const maxAttempts = (variable: string, purpose: string) =>
  Options.option({
    schema: Input.Count(10_000),
    default: 25,
    variable,
    text: "integer",
    purpose,
    example: "25"
  })
