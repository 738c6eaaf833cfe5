/**
 * Identifiers that reach SQL text. They are validated against a strict rule first and
 * double-quoted after, so a hostile name fails with a typed error and never reaches SQL.
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import * as Either from "effect/Either"

const MAX_IDENTIFIER_BYTES = 63

/** Lowercase SQL identifier: `[a-z_][a-z0-9_]*`, at most 63 bytes (PostgreSQL's NAMEDATALEN - 1). */
export const LOWERCASE_IDENTIFIER = /^[a-z_][a-z0-9_]*$/
/** Schema names may also use uppercase letters; they are always quoted, so case is kept. */
export const SCHEMA_IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/

export const validateIdentifier = (
  field: string,
  name: unknown,
  pattern: RegExp = LOWERCASE_IDENTIFIER
): Either.Either<string, DurableConfigError> => {
  const rule = pattern === LOWERCASE_IDENTIFIER
    ? "a lowercase SQL identifier ([a-z_][a-z0-9_]*) of at most 63 bytes"
    : "an SQL identifier ([A-Za-z_][A-Za-z0-9_]*) of at most 63 bytes"
  return typeof name === "string" && pattern.test(name) && Buffer.byteLength(name, "utf8") <= MAX_IDENTIFIER_BYTES
    ? Either.right(name)
    : Either.left(new DurableConfigError({ field, rule }))
}

/** Double-quotes an identifier that passed validation. */
export const quote = (name: string): string => `"${name.replace(/"/g, `""`)}"`
