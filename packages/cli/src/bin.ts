#!/usr/bin/env node
/**
 * The `effect-durable` executable: runs the command tree and turns its end into the
 * documented exit code, with one readable line on stderr for an expected failure (its cause
 * too with `--verbose`), a stack only for a bug, and every output scrubbed of secrets.
 *
 * @since 0.1.0
 */
import { CliConfig, ValidationError } from "@effect/cli"
// Deep imports: the package barrel loads much more than the command needs (startup time).
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Terminal from "effect/Terminal"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import { inspect, stripVTControlCharacters } from "node:util"
import { run } from "./internal/cli.js"
import { ExitCode, fromLibrary, isCliError } from "./internal/errors.js"
import { scrub } from "./internal/output.js"

// `effect-durable status --watch | head -1`: the reader went away; end quietly.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE") process.exit(process.exitCode ?? 0)
    throw error
  })
}

const verbose = process.argv.includes("--verbose")

const failureOf = (cause: Cause.Cause<unknown>) => Option.map(Cause.findErrorOption(cause), fromLibrary)

const exitCodeOf = (exit: Exit.Exit<unknown, unknown>): number => {
  if (Exit.isSuccess(exit)) return ExitCode.ok
  if (Cause.hasInterruptsOnly(exit.cause)) return ExitCode.interrupted
  const failure = failureOf(exit.cause)
  if (Option.isSome(failure)) {
    if (ValidationError.isValidationError(failure.value)) return ExitCode.usage
    if (isCliError(failure.value)) return failure.value.exitCode
    if (Terminal.isQuitException(failure.value)) return ExitCode.interrupted
  }
  return ExitCode.internal
}

const write = (text: string) => process.stderr.write(`${scrub(text)}\n`)

/** The chain of causes, one line each: name, message and the driver's codes; no stack. */
const describeCause = (cause: unknown): string => {
  const lines: Array<string> = []
  let current: unknown = cause
  for (let depth = 0; depth < 4 && current !== undefined && current !== null; depth++) {
    if (current instanceof Error || typeof current === "object") {
      const { cause: next, message, name, stack: _stack, ...fields } = current as Error & Record<string, unknown>
      const details = Object.entries(fields)
        .filter(([key, value]) => !key.startsWith("_") && value !== undefined && (typeof value !== "object" || value === null))
        .map(([key, value]) => `${key}=${inspect(value)}`)
      lines.push(`cause: ${name ?? "Error"}: ${message ?? ""}${details.length === 0 ? "" : ` (${details.join(", ")})`}`)
      current = next
    } else {
      lines.push(`cause: ${String(current)}`)
      current = undefined
    }
  }
  return lines.join("\n")
}

const report = (cause: Cause.Cause<unknown>) =>
  Effect.sync(() => {
    if (Cause.hasInterruptsOnly(cause)) return
    const failure = failureOf(cause)
    if (Option.isSome(failure)) {
      const error = failure.value
      // @effect/cli has printed what was wrong with the arguments; add how to get help.
      if (ValidationError.isValidationError(error)) {
        return write(
          "Usage: effect-durable [--database-url URL] [--schema NAME] [--verbose] <command> [options]\n" +
            "Run 'effect-durable --help', or 'effect-durable <command> --help'."
        )
      }
      if (isCliError(error)) {
        write(`effect-durable: ${error.message}`)
        if (verbose && error.cause !== undefined) write(describeCause(error.cause))
        return
      }
      if (Terminal.isQuitException(error)) return write("effect-durable: aborted")
    }
    write(`effect-durable: internal error (a bug; please report it)\n${Cause.pretty(cause)}`)
  })

// @effect/cli colours its help and errors always; plain text for pipes and NO_COLOR.
const plain = (args: ReadonlyArray<unknown>) => args.map((a) => (typeof a === "string" ? stripVTControlCharacters(a) : a))
const stripOut = "NO_COLOR" in process.env || !process.stdout.isTTY
const stripErr = "NO_COLOR" in process.env || !process.stderr.isTTY
const withPlainConsole = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Effect.console, (console) =>
    Effect.withConsole(self, {
      ...console,
      log: (...args) => console.log(...(stripOut ? plain(args) : args)),
      error: (...args) => console.error(...(stripErr ? plain(args) : args)),
      unsafe: {
        ...console.unsafe,
        log: (...args) => console.unsafe.log(...(stripOut ? plain(args) : args)),
        error: (...args) => console.unsafe.error(...(stripErr ? plain(args) : args))
      }
    }))

// --wizard asks its questions on a terminal; without one it would wait forever.
const refuseWizard = process.argv.includes("--wizard") && !process.stdin.isTTY

const program = (refuseWizard
  ? Effect.sync(() => {
    write("effect-durable: --wizard needs a terminal")
    process.exitCode = ExitCode.usage
  })
  : Effect.suspend(() => run(process.argv))).pipe(
    withPlainConsole,
    Effect.provide(CliConfig.layer({ showBuiltIns: false, showTypes: false })),
    Effect.provide(NodeContext.layer),
    Effect.tapCause(report)
  )

NodeRuntime.runMain(program, {
  disableErrorReporting: true,
  disablePrettyLogger: true,
  // runMain exits with process.exit for a code other than 0, which cuts piped output short:
  // flush both streams first.
  teardown: (exit, onExit) => {
    const code = refuseWizard ? ExitCode.usage : exitCodeOf(exit)
    process.exitCode = code
    let pending = 2
    const flushed = () => {
      if (--pending === 0) onExit(code)
    }
    process.stdout.write("", flushed)
    process.stderr.write("", flushed)
  }
})
