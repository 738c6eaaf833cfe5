#!/usr/bin/env node
// `npm run cli -- <command>`: the repository's own effect-durable, for contributors. npm links
// node_modules/.bin/effect-durable only when packages/cli/dist existed at install time, so
// `npx effect-durable` is missing after a fresh `npm ci`; this builds the command when its
// build is missing and runs it with the arguments given.
import { execFileSync } from "node:child_process"
import { existsSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const bin = join(root, "packages", "cli", "dist", "bundle", "effect-durable.mjs")
if (!existsSync(bin)) {
  process.stderr.write("effect-durable is not built yet: building it (npm run build builds everything)...\n")
  execFileSync(process.execPath, [
    join(root, "node_modules", "typescript", "bin", "tsc"),
    "-b",
    join(root, "packages", "cli", "tsconfig.src.json")
  ], { stdio: "inherit" })
  execFileSync(process.execPath, [join(root, "packages", "cli", "scripts", "bundle.mjs")], { stdio: "inherit" })
}
// npm runs a script in the repository's root; the command belongs where it was typed (its
// development database is found from there: examples/jobs keeps its own).
if (process.env.INIT_CWD !== undefined) process.chdir(process.env.INIT_CWD)
await import(pathToFileURL(bin).href)
