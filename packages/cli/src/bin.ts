#!/usr/bin/env node
/**
 * The `effect-durable` executable: runs the command tree and turns its end into the
 * documented exit code, with one readable line on stderr for an expected failure (its cause
 * too with `--verbose`), a stack only for a bug, and every output scrubbed of secrets.
 *
 * @since 0.1.0
 */
// Deep imports: the package barrel loads much more than the command needs (startup time).
import { printableLines } from "@effect-durable/core/Printable"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as Cause from "effect/Cause"
import * as CliError from "effect/cli/CliError"
import * as CliOutput from "effect/cli/CliOutput"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Terminal from "effect/Terminal"
import { inspect } from "node:util"
import { run } from "./internal/cli.js"
import { ExitCode, fromLibrary, isCommandError } from "./internal/errors.js"
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
    // effect/cli's errors: a bad command, flag or value (already shown with the usage).
    if (CliError.isCliError(failure.value)) return ExitCode.usage
    if (isCommandError(failure.value)) return failure.value.exitCode
    if (Terminal.isQuitError(failure.value)) return ExitCode.interrupted
  }
  return ExitCode.internal
}

const write = (text: string) => process.stderr.write(`${printableLines(scrub(text))}\n`)

/** The chain of causes, one line each: name, message and the driver's codes; no stack. */
const describeCause = (cause: unknown): string => {
  const lines: Array<string> = []
  let current: unknown = cause
  for (let depth = 0; depth < 4 && current !== undefined && current !== null; depth++) {
    if (current instanceof Error || typeof current === "object") {
      const { cause: next, message, name, stack: _stack, ...fields } = current as Error & Record<string, unknown>
      const details = Object.entries(fields)
        .filter(([key, value]) =>
          !key.startsWith("_") && value !== undefined && (typeof value !== "object" || value === null)
        )
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
      // effect/cli has shown what was wrong with the arguments, and the usage (`presenter`).
      if (CliError.isCliError(error)) return
      if (isCommandError(error)) {
        write(`effect-durable: ${error.message}`)
        if (verbose && error.cause !== undefined) write(describeCause(error.cause))
        return
      }
      if (Terminal.isQuitError(error)) return write("effect-durable: aborted")
    }
    write(`effect-durable: internal error (a bug; please report it)\n${Cause.pretty(cause)}`)
  })

/**
 * Help and the version on stdout; a bad invocation on stderr only (what is wrong, then the
 * command's usage), so a script reading stdout never parses help text. The default formatter
 * colours only a terminal (never a pipe, nor with NO_COLOR).
 */
const presenter: CliOutput.Presenter = {
  present: (event) => {
    if (event._tag !== "InvalidInvocation") return CliOutput.defaultPresenter.present(event)
    const command = event.commandPath.join(" ")
    return Console.error(printableLines(scrub([
      ...event.errors.map((error) => `effect-durable: ${error.message}`),
      `Usage: ${event.helpDoc.usage}`,
      event.commandPath.length <= 1
        ? "Run 'effect-durable --help' for every command and flag."
        : `Run '${command} --help' for its flags, or 'effect-durable --help' for every command.`
    ].join("\n"))))
  }
}

const formatter = CliOutput.defaultFormatter()
const output = Layer.mergeAll(
  CliOutput.layerPresenter(presenter),
  // `--version` prints the version alone, for scripts.
  CliOutput.layer({ ...formatter, formatVersion: (_name, version) => version })
)

// --wizard asks its questions on a terminal; without one it would wait forever.
const refuseWizard = process.argv.includes("--wizard") && !process.stdin.isTTY

const program = (refuseWizard
  ? Effect.sync(() => {
    write("effect-durable: --wizard needs a terminal")
    process.exitCode = ExitCode.usage
  })
  : Effect.suspend(() => run(process.argv.slice(2)))).pipe(
    Effect.provide(Layer.mergeAll(output, NodeServices.layer)),
    Effect.tapCause(report)
  )

NodeRuntime.runMain(program, {
  disableErrorReporting: true,
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
