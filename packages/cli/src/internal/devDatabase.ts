/**
 * The project's development database (`@effect-durable/embedded`'s `DevDatabase`), for the
 * command on a laptop: found by its folder in the working directory or a folder above it,
 * used through the app's server while the app runs, and otherwise started by the command
 * itself for as long as the command runs. `@effect-durable/embedded` is an optional peer: it
 * is loaded only here, only when the development database is used, so a production install
 * of the CLI never carries PostgreSQL's binaries. The shipped command is a bundle that holds
 * its code (one copy of effect for both: a second one would not know the first's values), so
 * whether it is installed — with the binaries it brings — is asked of the resolver first.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as Redacted from "effect/Redacted"
import { existsSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join, resolve } from "node:path"
import { CommandError, ExitCode, usage } from "./errors.js"
import { note, registerUrlSecrets } from "./output.js"

/**
 * `DevDatabase.DEFAULT_DIRECTORY`, repeated: the folder is looked for before the optional
 * package is loaded, and its absence must not hide a plain "no database" (a test keeps the
 * two equal).
 */
export const DEV_DIRECTORY = ".effect-durable/postgres"

/** What marks a development database: its settings, written once its first start's initdb is done. */
export const DEV_MARKER = "server.json"

/** The development database's folder in `from` or the nearest folder above it that has one. */
export const findDevDirectory = (from: string): string | undefined => {
  for (let folder = resolve(from);; folder = dirname(folder)) {
    const candidate = join(folder, DEV_DIRECTORY)
    if (existsSync(join(candidate, DEV_MARKER))) return candidate
    if (dirname(folder) === folder) return undefined
  }
}

export const hasDevDatabase = (directory: string): boolean => existsSync(join(directory, DEV_MARKER))

export interface OpenDevDatabase {
  readonly url: Redacted.Redacted<string>
  readonly port: number
  readonly directory: string
  /** Whether this command runs the server (it stops when the command ends). */
  readonly owned: boolean
  /** Whether this start created it (an empty cluster). */
  readonly created: boolean
}

/**
 * The development database a command has already opened (`dev-database --migrate`): the
 * work it runs next uses that one instead of opening it a second time.
 */
export const CurrentDevDatabase = Context.Reference<OpenDevDatabase | undefined>(
  "@effect-durable/cli/CurrentDevDatabase",
  { defaultValue: () => undefined }
)

export const INSTALL_EMBEDDED =
  "the development database needs @effect-durable/embedded: npm install --save-dev @effect-durable/embedded"

const isMissingPackage = (cause: unknown): boolean => {
  const code = (cause as NodeJS.ErrnoException | undefined)?.code
  return (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") &&
    String((cause as Error).message).includes("@effect-durable/embedded")
}

// The package as installed: asked of the resolver, since the bundled command carries its code
// but not the PostgreSQL binaries it finds from where it is installed (`installedAt`).
const load = Effect.try({
  try: () => createRequire(import.meta.url).resolve("@effect-durable/embedded/DevDatabase"),
  catch: (cause) => cause
}).pipe(
  Effect.flatMap((installedAt) =>
    Effect.tryPromise({
      try: async () => ({ DevDatabase: await import("@effect-durable/embedded/DevDatabase"), installedAt }),
      catch: (cause) => cause
    })
  ),
  Effect.catch((cause) => isMissingPackage(cause) ? Effect.fail(usage(INSTALL_EMBEDDED, cause)) : Effect.die(cause))
)

/**
 * Opens the development database in `directory` for the current scope: the server of the
 * process that serves it (the app, or `effect-durable dev-database`) when there is one,
 * otherwise a server of this command's own, stopped when the scope closes. Its password is
 * registered as a secret, so no output of the command carries it.
 */
export const openDevDatabase = (directory: string) =>
  Effect.gen(function*() {
    const { DevDatabase, installedAt } = yield* load
    const database = yield* DevDatabase.make({ directory, installedAt }).pipe(
      // The library's own log line is replaced by the command's note (one line, said once).
      Effect.provide(Logger.layer([])),
      Effect.mapError((error) =>
        new CommandError({ exitCode: ExitCode.unreachable, message: error.message, cause: error })
      )
    )
    registerUrlSecrets(Redacted.value(database.url))
    return {
      url: database.url,
      port: database.port,
      directory: database.directory,
      owned: database.owned,
      created: database.created
    } satisfies OpenDevDatabase
  })

/** The URL as the command shows it: the password stays in `server.json`. */
export const shownUrl = (database: OpenDevDatabase) => `postgres://postgres@127.0.0.1:${database.port}/postgres`

/** What a command that started the server for itself says, once. */
export const startedNote = (database: OpenDevDatabase) =>
  note(
    `effect-durable: started the development database in ${database.directory} for this command ` +
      `(nothing was serving it); it stops when the command ends`
  )
