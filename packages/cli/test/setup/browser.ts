// Which Chromium the browser suite drives: CHROMIUM_PATH, else Debian's package (`chromium`).
// Nothing is downloaded. EFFECT_DURABLE_REQUIRE_BROWSER=1 (set by .ci/run) makes a missing
// browser a failure instead of a skipped suite, as EFFECT_DURABLE_REQUIRE_NATS does for NATS.
import { spawnSync } from "node:child_process"
import { existsSync } from "node:fs"

export const INSTALL_HINT = "install it (Debian: apt-get install chromium) or set CHROMIUM_PATH"

const CANDIDATES = [
  "/usr/bin/chromium",
  "/usr/lib/chromium/chromium",
  "/usr/bin/chromium-browser",
  "/usr/bin/google-chrome"
]

export const findBrowser = (): {
  readonly path: string | undefined
  readonly required: boolean
  readonly reason: string
} => {
  const required = process.env.EFFECT_DURABLE_REQUIRE_BROWSER === "1"
  const configured = process.env.CHROMIUM_PATH
  const candidates = configured === undefined || configured === "" ? CANDIDATES : [configured]
  for (const candidate of candidates) {
    if (!existsSync(candidate)) continue
    const probe = spawnSync(candidate, ["--version"], { encoding: "utf8", timeout: 20_000 })
    if (probe.status === 0) return { path: candidate, required, reason: probe.stdout.trim() }
  }
  return { path: undefined, required, reason: `no Chromium at ${candidates.join(", ")}: ${INSTALL_HINT}` }
}
