/**
 * The `effect-durable` command tree. Global flags (`--database-url`, `--dev`, `--schema`,
 * `--verbose`, ...) belong to the root and go before the command or after it.
 * Every command's logs go to stderr, scrubbed of secrets.
 */
import * as Command from "effect/cli/Command"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as References from "effect/References"
import * as Result from "effect/Result"
import { createRequire } from "node:module"
import { dashValues } from "./arguments.js"
import { dashboard } from "./commands/dashboard.js"
import { deadLetters } from "./commands/deadLetters.js"
import { devDatabase } from "./commands/devDatabase.js"
import { doctor } from "./commands/doctor.js"
import { explain } from "./commands/explain.js"
import { feeds } from "./commands/feeds.js"
import { ledger } from "./commands/ledger.js"
import { limits } from "./commands/limits.js"
import { cancel, moveAside, restore, retryNow } from "./commands/messages.js"
import { purge } from "./commands/purge.js"
import { schedules } from "./commands/schedules.js"
import { grant, migrate, verify } from "./commands/schema.js"
import { status } from "./commands/status.js"
import { pause, resume } from "./commands/topics.js"
import { workflows } from "./commands/workflows.js"
import { root } from "./connection.js"
import { usage } from "./errors.js"
import { stderrLogger } from "./output.js"

// With rootDir src, a JSON import of ../package.json would leave the compiled tree.
// Two folders under the package, here (dist/internal/) as in the bundle (dist/bundle/).
export const version: string = createRequire(import.meta.url)("../../package.json").version

/** Every command logs through `stderrLogger`; `--verbose` adds the debug logs. */
const logging = (verbose: boolean) =>
  Layer.mergeAll(
    Logger.layer([stderrLogger]),
    verbose ? Layer.succeed(References.MinimumLogLevel, "Debug") : Layer.empty
  )

const tree = root.pipe(
  Command.withHandler(() => usage("name a command; run effect-durable --help for the list")),
  Command.withSubcommands([
    migrate,
    verify,
    status,
    deadLetters,
    retryNow,
    moveAside,
    cancel,
    restore,
    purge,
    explain,
    grant,
    ledger,
    pause,
    resume,
    doctor,
    dashboard,
    workflows,
    schedules,
    limits,
    feeds,
    devDatabase
  ])
)

export const command = Command.provide(tree, ({ verbose }) => logging(verbose))

const runWith = Command.runWith(command, { version })

/** Runs the command line (the arguments after the script's path); `-12h` is a value, never flags (`dashValues`). */
export const run = (argv: ReadonlyArray<string>) =>
  Result.match(dashValues(argv), { onFailure: Effect.fail, onSuccess: runWith })
