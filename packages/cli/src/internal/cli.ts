/**
 * The `effect-durable` command tree. Global options (`--database-url`, `--schema`,
 * `--verbose`) belong to the root and go before the command or after all of its own options.
 * Every command's logs go to stderr, scrubbed of secrets.
 */
import { Command } from "@effect/cli"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { createRequire } from "node:module"
import { dashboard } from "./commands/dashboard.js"
import { deadLetters } from "./commands/deadLetters.js"
import { doctor } from "./commands/doctor.js"
import { explain } from "./commands/explain.js"
import { ledger } from "./commands/ledger.js"
import { purge } from "./commands/purge.js"
import { grant, migrate, verify } from "./commands/schema.js"
import { status } from "./commands/status.js"
import { pause, resume } from "./commands/topics.js"
import { root } from "./connection.js"
import { usage } from "./errors.js"
import { stderrLogger } from "./output.js"

// With rootDir src, a JSON import of ../package.json would leave the compiled tree.
const version: string = createRequire(import.meta.url)("../../package.json").version

export const command = root.pipe(
  Command.withHandler(() => usage("name a command; run effect-durable --help for the list")),
  Command.withSubcommands([
    migrate,
    verify,
    status,
    deadLetters,
    purge,
    explain,
    grant,
    ledger,
    pause,
    resume,
    doctor,
    dashboard
  ]),
  Command.transformHandler((effect, { verbose }) =>
    effect.pipe(
      verbose ? Logger.withMinimumLogLevel(LogLevel.Debug) : (self) => self,
      Effect.provide(Logger.layer([stderrLogger]))
    )
  )
)

export const run = Command.run(command, { name: "effect-durable", version })
