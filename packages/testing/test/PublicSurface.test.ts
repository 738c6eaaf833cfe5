// Every package's public surface names only public types: its `exports` seal `internal/`,
// and no declaration of a public module refers to an internal type that no public module
// exports. Checked on the declarations `tsc -b` emits (built here first, incrementally).
import { describe, expect, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..")
const packages = readdirSync(join(root, "packages")).filter((name) =>
  readdirSync(join(root, "packages", name)).includes("package.json")
)

/** Names a declaration file imports from `./internal/...`, and names it re-exports. */
const internalNames = (text: string) => {
  const imported = new Set<string>()
  const exported = new Set<string>()
  for (const match of text.matchAll(/^(import|export)\s+(type\s+)?\{([^}]*)\}\s+from\s+"\.\/internal\/[^"]+";/gm)) {
    for (const part of match[3]!.split(",")) {
      const name = part.replace(/\btype\b/, "").split(/\s+as\s+/).pop()!.trim()
      if (name.length > 0) (match[1] === "import" ? imported : exported).add(name)
    }
  }
  for (const match of text.matchAll(/import\("\.\/internal\/[^"]+"\)\.(\w+)/g)) imported.add(match[1]!)
  return { imported, exported }
}

describe("public surface", () => {
  it("every package's exports seal ./internal/*", () => {
    for (const name of packages) {
      const manifest = JSON.parse(readFileSync(join(root, "packages", name, "package.json"), "utf8"))
      expect(manifest.exports?.["./internal/*"], name).toBeNull()
    }
  })

  it("no public declaration names an internal type that no public module exports", () => {
    execFileSync(process.execPath, [
      join(root, "node_modules", "typescript", "bin", "tsc"),
      "-b",
      ...packages.map((name) => join(root, "packages", name, "tsconfig.src.json"))
    ], { stdio: "pipe" })
    for (const name of packages) {
      const dist = join(root, "packages", name, "dist")
      const files = readdirSync(dist).filter((file) => file.endsWith(".d.ts"))
      const scans = files.map((file) => internalNames(readFileSync(join(dist, file), "utf8")))
      const public_ = new Set(scans.flatMap((scan) => [...scan.exported]))
      const leaked = scans.flatMap((scan, i) =>
        [...scan.imported].filter((n) => !public_.has(n)).map((n) => `${files[i]}: ${n}`)
      )
      expect(leaked, name).toEqual([])
    }
  }, 120_000)
})
