// The house rules, held by tools rather than memory: the lint rules bite (a 401-line source
// file, a runtime import of a migration), and every list that mirrors the tree — the design
// document's layout map, the TypeScript project lists, the workspace — names exactly what the
// tree holds. A package, a public module or an internal room added without its line fails here.
import { describe, expect, it } from "@effect/vitest"
import { ESLint } from "eslint"
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..")
const read = (path: string) => readFileSync(join(root, path), "utf8")
const packages = readdirSync(join(root, "packages")).filter((name) =>
  existsSync(join(root, "packages", name, "package.json"))
)
  .sort()

const lint = async (filePath: string, text: string) => {
  const eslint = new ESLint({ cwd: root })
  const [result] = await eslint.lintText(text, { filePath: join(root, filePath) })
  return result!.messages.map((message) => message.ruleId)
}

// A file that passes every other rule: `lines` lines of a numbered constant each.
const fileOf = (lines: number) =>
  Array.from({ length: lines }, (_, i) => `export const line${i} = ${i}`).join("\n") + "\n"

describe("the lint rules bite", () => {
  it("a source file of 401 lines is refused, one of 400 passes; tests and migrations are excepted", async () => {
    expect(await lint("packages/pg/src/Sized.ts", fileOf(400))).toEqual([])
    expect(await lint("packages/pg/src/Sized.ts", fileOf(401))).toEqual(["max-lines"])
    expect(await lint("packages/cli/src/internal/page/Sized.ts", fileOf(401))).toEqual(["max-lines"])
    expect(await lint("packages/pg/test/Sized.test.ts", fileOf(401))).toEqual([])
    expect(await lint("packages/pg/src/internal/migrations/0099_sized.ts", fileOf(401))).toEqual([])
  }, 60_000)

  it("only the migration runner imports a migration", async () => {
    const importing = (from: string) =>
      `import { migration } from "${from}"\n\nexport const version = migration.version\n`
    expect(await lint("packages/pg/src/FlowControl.ts", importing("./internal/migrations/0017_flow_limits.js")))
      .toEqual(["no-restricted-imports"])
    expect(await lint("packages/pg/src/internal/queue/spec.ts", importing("../migrations/0018_rate_limits.js")))
      .toEqual(["no-restricted-imports"])
    expect(
      await lint("packages/workflow/src/Engine.ts", importing("@effect-durable/pg/internal/migrations/0013_workflows"))
    )
      .toEqual(["no-restricted-imports"])
    expect(await lint("packages/pg/src/Migrations.ts", importing("./internal/migrations/index.js"))).toEqual([])
    expect(await lint("packages/pg/test/Migrations.test.ts", importing("../src/internal/migrations/index.js"))).toEqual(
      []
    )
  }, 60_000)

  it("code above the pg package names no queue table: it goes through the pg API", async () => {
    const reading = (table: string) =>
      `declare const settings: { table: (name: string) => string }\n\nexport const t = settings.table("${table}")\n`
    expect(await lint("packages/workflow/src/internal/store.ts", reading("outbox"))).toEqual(["no-restricted-syntax"])
    expect(await lint("packages/projector/src/internal/loop.ts", reading("inbox"))).toEqual(["no-restricted-syntax"])
    expect(await lint("packages/workflow/src/internal/store.ts", reading("workflow_steps"))).toEqual([])
    expect(await lint("packages/pg/src/Outbox.ts", reading("outbox"))).toEqual([])
  }, 60_000)
})

/** The layout map of docs/design.md: its code block under "Repository layout". */
const layoutMap = () => {
  const text = read("docs/design.md")
  const section = text.slice(text.indexOf("## Repository layout"))
  const block = /```\n([\s\S]*?)```/.exec(section)
  if (block === null) throw new Error("docs/design.md has no layout block under Repository layout")
  return block[1]!.split("\n")
}

/** The names a map entry lists (`pure: A, B (what B is), c/ (...)`): parenthesised text and a leading `role:` left out. */
const namesIn = (text: string) => {
  let depth = 0
  let plain = ""
  for (const char of text) {
    if (char === "(") depth++
    else if (char === ")") depth--
    else if (depth === 0) plain += char
  }
  return plain.replace(/^\s*[a-z ]+:\s/, "").split(",").map((name) => name.trim())
    .filter((name) => /^[A-Za-z][\w.]*\/?$/.test(name))
}

/** Per package: the public modules and the internal rooms the map lists. */
const mappedPackages = () => {
  const entries = new Map<string, { public: string; internal: string }>()
  let current: { public: string; internal: string } | undefined
  let target: "public" | "internal" | "other" = "other"
  for (const line of layoutMap()) {
    const opened = /^packages\/([\w-]+)\/\s+(.*)$/.exec(line)
    const section = /^ {2}(src\/internal\/|examples\/|test\/)\s+(.*)$/.exec(line)
    if (opened !== null) {
      current = { public: opened[2]!, internal: "" }
      entries.set(opened[1]!, current)
      target = "public"
    } else if (section !== null) {
      target = section[1] === "src/internal/" ? "internal" : "other"
      if (current !== undefined && target === "internal") current.internal = section[2]!
    } else if (/^\S/.test(line)) {
      current = undefined
    } else if (current !== undefined && target !== "other") {
      current[target] += " " + line.trim()
    }
  }
  return new Map(
    [...entries].map((
      [name, entry]
    ) => [name, { publicModules: new Set(namesIn(entry.public)), internal: new Set(namesIn(entry.internal)) }])
  )
}

const sourceOf = (name: string) => {
  const src = join(root, "packages", name, "src")
  const publicModules = readdirSync(src).filter((f) => f.endsWith(".ts")).map((f) => f.slice(0, -3))
  const internalDir = join(src, "internal")
  const internal = existsSync(internalDir)
    ? readdirSync(internalDir).map((f) =>
      statSync(join(internalDir, f)).isDirectory() ? `${f}/` : f.replace(/\.ts$/, "")
    )
    : []
  return { publicModules: publicModules.sort(), internal: internal.sort() }
}

describe("lists that mirror the tree", () => {
  it("docs/design.md's layout map names every package, public module and internal room, and nothing else", () => {
    const mapped = mappedPackages()
    expect([...mapped.keys()].sort()).toEqual(packages)
    for (const name of packages) {
      const source = sourceOf(name)
      const map = mapped.get(name)!
      expect({ package: name, public: [...map.publicModules].sort() }).toEqual({
        package: name,
        public: source.publicModules
      })
      expect({ package: name, internal: [...map.internal].sort() }).toEqual({
        package: name,
        internal: source.internal
      })
    }
  })

  it("tsconfig.json and tsconfig.build.json reference every package (and only those)", () => {
    const references = (file: string) =>
      (JSON.parse(read(file)).references as Array<{ path: string }>).map((reference) => reference.path)
    const all = references("tsconfig.json")
    expect(all.filter((path) => path.startsWith("packages/")).sort()).toEqual(
      packages.map((name) => `packages/${name}`)
    )
    for (const path of all) expect(existsSync(join(root, path, "tsconfig.json")), path).toBe(true)
    expect(references("tsconfig.build.json").sort()).toEqual(
      packages.map((name) => `packages/${name}/tsconfig.src.json`).sort()
    )
  })
})
