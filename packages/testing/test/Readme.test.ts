// The README's TypeScript is code the test suite compiles and runs: every ```ts block is
// preceded by `<!-- example: <file> -->` and is that file, verbatim. The files are examples
// (or tests) of their packages, each run by a test there, so the README cannot drift.
import { describe, expect, it } from "@effect/vitest"
import { existsSync, readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..")
const readme = readFileSync(join(root, "README.md"), "utf8")

const blocks = [...readme.matchAll(/(?:<!-- example: (\S+) -->\n)?```ts\n([\s\S]*?)```/g)].map((match) => ({
  file: match[1],
  code: match[2]!,
  line: readme.slice(0, match.index).split("\n").length
}))

describe("README", () => {
  it("has TypeScript snippets, and each names the file it is", () => {
    expect(blocks.length).toBeGreaterThan(10)
    expect(blocks.filter((block) => block.file === undefined).map((block) => `line ${block.line}`)).toEqual([])
  })

  it("shows every file exactly as it is compiled and run", () => {
    for (const block of blocks) {
      if (block.file === undefined) continue
      const path = join(root, block.file)
      expect(existsSync(path), `${block.file} (README line ${block.line}) does not exist`).toBe(true)
      expect(block.code, `README line ${block.line} differs from ${block.file}`).toBe(readFileSync(path, "utf8"))
    }
  })

  it("shows only files a test runs: examples imported by a test, or tests themselves", () => {
    for (const block of blocks) {
      if (block.file === undefined) continue
      if (/\/test\/[^/]+\.test\.ts$/.test(block.file)) continue
      const name = block.file.split("/").pop()!.replace(/\.ts$/, "")
      const packageDir = block.file.split("/").slice(0, 2).join("/")
      const tests = [`${packageDir}/test/Examples.test.ts`, `${packageDir}/test/JetStream.test.ts`]
        .map((test) => join(root, test))
        .filter(existsSync)
        .map((test) => readFileSync(test, "utf8"))
      expect(tests.some((test) => test.includes(`../examples/${name}.js`)), `no test runs ${block.file}`).toBe(true)
    }
  })
})
