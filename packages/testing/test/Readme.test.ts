// The documentation's TypeScript is code the test suite compiles and runs: every ```ts block of
// README.md and of docs/*.md is preceded by `<!-- example: <file> -->` (a path from the
// repository's root) and is that file, verbatim. The files are examples (or tests) of their
// packages, each run by a test there, so no document can drift. `node
// scripts/sync-readme-examples.mjs` rewrites the blocks from the files. And every relative link
// of those documents points at a file that exists, and at a heading of it when it names one.
import { describe, expect, it } from "@effect/vitest"
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..")

/** README.md and every docs/*.md, as paths from the root. */
const documents = [
  "README.md",
  ...readdirSync(join(root, "docs")).filter((name) => name.endsWith(".md")).sort().map((name) => `docs/${name}`)
]
const texts = new Map(documents.map((document) => [document, readFileSync(join(root, document), "utf8")]))

const blocks = documents.flatMap((document) => {
  const text = texts.get(document)!
  return [...text.matchAll(/(?:<!-- example: (\S+) -->\n)?```ts\n([\s\S]*?)```/g)].map((match) => ({
    document,
    file: match[1],
    code: match[2]!,
    line: text.slice(0, match.index).split("\n").length
  }))
})
const where = (block: { readonly document: string; readonly line: number }) => `${block.document} line ${block.line}`

/** GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen. */
const slug = (heading: string) =>
  heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, "").replace(/\s/g, "-")

/** The anchors of a Markdown file's headings (outside code blocks), numbered when repeated. */
const anchors = (markdown: string): ReadonlySet<string> => {
  const seen = new Map<string, number>()
  const result = new Set<string>()
  for (const match of withoutFences(markdown).matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = slug(match[1]!)
    const count = seen.get(base) ?? 0
    seen.set(base, count + 1)
    result.add(count === 0 ? base : `${base}-${count}`)
  }
  return result
}

/** The text with fenced code blocks blanked (their lines kept, so line numbers hold). */
const withoutFences = (markdown: string) =>
  markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[ \t]*$/gm, (block) => block.replace(/[^\n]/g, " "))

/** The text with fenced code blocks and inline code blanked: what is left is prose. */
const withoutCode = (markdown: string) =>
  withoutFences(markdown).replace(/`[^`\n]*`/g, (code) => " ".repeat(code.length))

describe("README and docs", () => {
  it("have TypeScript snippets, and each names the file it is", () => {
    expect(blocks.length).toBeGreaterThan(10)
    expect(blocks.filter((block) => block.file === undefined).map(where)).toEqual([])
  })

  it("show every file exactly as it is compiled and run", () => {
    for (const block of blocks) {
      if (block.file === undefined) continue
      const path = join(root, block.file)
      expect(existsSync(path), `${block.file} (${where(block)}) does not exist`).toBe(true)
      expect(block.code, `${where(block)} differs from ${block.file}: run node scripts/sync-readme-examples.mjs`).toBe(
        readFileSync(path, "utf8")
      )
    }
  })

  it("show only files a test runs: examples imported by a test, or tests themselves", () => {
    const notRun: Array<string> = []
    for (const block of blocks) {
      if (block.file === undefined) continue
      if (/\/test\/[^/]+\.test\.ts$/.test(block.file)) continue
      const name = block.file.split("/").pop()!.replace(/\.ts$/, "")
      const packageDir = block.file.split("/").slice(0, 2).join("/")
      const testDir = join(root, packageDir, "test")
      const tests = (existsSync(testDir) ? readdirSync(testDir) : [])
        .filter((file) => file.endsWith(".test.ts"))
        .map((file) => readFileSync(join(testDir, file), "utf8"))
      if (!tests.some((test) => test.includes(`../examples/${name}.js`))) notRun.push(`${block.file} (${where(block)})`)
    }
    expect(notRun, "shown but not run by a test").toEqual([])
  })

  it("link only to files and headings that exist", () => {
    const broken: Array<string> = []
    for (const document of documents) {
      const text = withoutCode(texts.get(document)!)
      for (const match of text.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        const target = match[1]!
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue // https:, mailto:
        const line = text.slice(0, match.index).split("\n").length
        const [file, anchor] = target.split("#", 2) as [string, string | undefined]
        const path = file === "" ? join(root, document) : join(root, dirname(document), decodeURIComponent(file))
        if (!existsSync(path)) {
          broken.push(`${document} line ${line}: ${target} (no file ${relative(root, path)})`)
          continue
        }
        if (anchor === undefined || anchor === "") continue
        if (statSync(path).isDirectory() || !path.endsWith(".md")) {
          broken.push(`${document} line ${line}: ${target} (an anchor into a file that is not Markdown)`)
          continue
        }
        if (!anchors(readFileSync(path, "utf8")).has(decodeURIComponent(anchor))) {
          broken.push(`${document} line ${line}: ${target} (no heading #${anchor} in ${relative(root, path)})`)
        }
      }
    }
    expect(broken).toEqual([])
  })

  it("keep the README a front door", () => {
    expect(texts.get("README.md")!.split("\n").length).toBeLessThanOrEqual(400)
  })
})
