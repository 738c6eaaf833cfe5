/**
 * What the command reports when it fails: every expected failure becomes one `CommandError`
 * with an exit code and one readable line, the library's typed errors included (named
 * after the flag the user typed, not the library's argument). The cause stays attached for
 * `--verbose`.
 */
import { DatabaseError, DurableConfigError, InvalidInput, SchemaVersionMismatch } from "@effect-durable/core/Errors"
import { isSessionFailure } from "@effect-durable/pg/ErrorClassification"
import * as CliError from "effect/cli/CliError"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"

/** The documented exit codes. */
export const ExitCode = {
  ok: 0,
  /** A check found a problem (verify: drift; doctor: a failing check; show: nothing found). */
  checkFailed: 1,
  /** Bad arguments or configuration, or a confirmation refused. */
  usage: 2,
  /** No session with the database: refused, unreachable, authentication failed, no such database. */
  unreachable: 3,
  /** The schema is not at the version this release needs: run `effect-durable migrate`. */
  schemaVersion: 4,
  /** A statement failed (permission denied, a timeout, ...). */
  databaseError: 5,
  /** A bug: the stack is printed. */
  internal: 70,
  /** Interrupted (Ctrl-C, SIGTERM, or Ctrl-C at a prompt). */
  interrupted: 130
} as const

export class CommandError extends Data.TaggedError("CommandError")<{
  readonly exitCode: number
  readonly message: string
  readonly cause?: unknown
}> {}

export const usage = (message: string, cause?: unknown) =>
  new CommandError({ exitCode: ExitCode.usage, message, cause })
export const checkFailed = (message: string) => new CommandError({ exitCode: ExitCode.checkFailed, message })

export const isCommandError = (u: unknown): u is CommandError => u instanceof CommandError

/**
 * What a flag's or argument's own check fails with: the runner shows it like any parse
 * error (exit 2, the usage on stderr), in the words given here.
 */
export const invalidValue = (message: string) => new CliError.ValidationError({ message })

/** The flag a library argument came from, to name what the user typed. */
const FLAGS: Readonly<Record<string, string>> = {
  olderThan: "--older-than",
  batchSize: "--batch-size",
  topic: "--topic",
  topics: "--topic",
  consumer: "--consumer",
  role: "<role>",
  identity: "<subject> <operation> <key>",
  id: "<id>",
  ids: "--id",
  limit: "--limit",
  by: "--by",
  schema: "--schema",
  "filter.ids": "--id",
  "filter.topic": "--topic",
  "filter.deadFor": "--older-than",
  "filter.error": "--error",
  "options.before": "--before",
  "page.before": "--before",
  "page.limit": "--limit",
  "options.limit": "--limit",
  "options.batchSize": "--batch-size",
  maxInFlight: "--max",
  groupMaxInFlight: "--group-max",
  weight: "--weight",
  "rate.burst": "--burst",
  "groupRate.burst": "--group-burst",
  rate: "--rate",
  groupRate: "--group-rate"
}

const flagOf = (argument: string): string => {
  for (const [name, flag] of Object.entries(FLAGS).sort((a, b) => b[0].length - a[0].length)) {
    if (argument === name || argument.startsWith(`${name}[`) || argument.startsWith(`${name}.`)) return flag
  }
  return argument
}

/** The library's typed failures as `CommandError`s, by their type; anything else passes through unchanged. */
export const fromLibrary = (error: unknown): unknown => {
  if (error instanceof InvalidInput) return usage(`invalid ${flagOf(error.argument)}: ${error.rule}`, error)
  if (error instanceof DurableConfigError) return usage(`invalid ${error.field}: ${error.rule}`, error)
  if (error instanceof SchemaVersionMismatch) {
    return new CommandError({
      exitCode: ExitCode.schemaVersion,
      message: error.found < error.needed
        ? `schema ${error.schema} is at version ${error.found}; this release needs ${error.needed}: run effect-durable migrate`
        : `schema ${error.schema} is at version ${error.found}, newer than this release knows (${error.needed}): use a newer effect-durable`,
      cause: error
    })
  }
  if (error instanceof DatabaseError) {
    return isSessionFailure(error)
      ? new CommandError({
        exitCode: ExitCode.unreachable,
        message: `cannot reach the database: ${error.detail}`,
        cause: error
      })
      : new CommandError({
        exitCode: ExitCode.databaseError,
        message: `${error.operation} failed${error.code === null ? "" : ` [${error.code}]`}: ${error.detail}`,
        cause: error
      })
  }
  return error
}

/** Maps the library's typed failures of `effect` to `CommandError`s. */
export const mapLibraryErrors = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, CommandError | E, R> =>
  Effect.mapError(effect, (error) => fromLibrary(error) as CommandError | E)
