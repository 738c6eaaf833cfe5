// Vitest global setup of the CLI suites: they run the built, bundled command
// (dist/bundle/effect-durable.mjs, the package's bin), so build and bundle it first (tsc -b is
// incremental: a second run is quick); a test never runs a stale build.
import { execFileSync } from "node:child_process"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

export default function setup(): void {
  const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..")
  const tsc = join(root, "..", "..", "node_modules", "typescript", "bin", "tsc")
  execFileSync(process.execPath, [tsc, "-b", join(root, "tsconfig.src.json")], { stdio: "inherit" })
  execFileSync(process.execPath, [join(root, "scripts", "bundle.mjs")], { stdio: "inherit" })
}
