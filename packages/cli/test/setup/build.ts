// Vitest global setup of the CLI suites: they run the built binary (dist/bin.js), so build it
// first (tsc -b is incremental: a second run is quick); a test never runs a stale build.
import { execFileSync } from "node:child_process"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

export default function setup(): void {
  const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..")
  const tsc = join(root, "..", "..", "node_modules", "typescript", "bin", "tsc")
  execFileSync(process.execPath, [tsc, "-b", join(root, "tsconfig.src.json")], { stdio: "inherit" })
}
