#!/usr/bin/env node
// Rewrites every block marked `<!-- example: <file> -->` in README.md and in docs/*.md with the
// file's current text. `npm test` fails while a document and the files differ
// (packages/testing/test/Readme.test.ts); run `node scripts/sync-readme-examples.mjs` after
// changing an example.
import { readdirSync, readFileSync, writeFileSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const documents = [
  join(root, "README.md"),
  ...readdirSync(join(root, "docs")).filter((name) => name.endsWith(".md")).sort().map((name) =>
    join(root, "docs", name)
  )
]
let changed = 0
for (const path of documents) {
  const text = readFileSync(path, "utf8")
  const synced = text.replace(
    /<!-- example: (\S+) -->\n```ts\n[\s\S]*?```/g,
    (_, file) => `<!-- example: ${file} -->\n\`\`\`ts\n${readFileSync(join(root, file), "utf8")}\`\`\``
  )
  if (synced !== text) {
    writeFileSync(path, synced)
    changed++
    console.log(`${relative(root, path)}: examples synced`)
  }
}
console.log(changed === 0 ? "README and docs examples already in sync" : `${changed} document(s) synced`)
