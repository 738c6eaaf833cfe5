#!/usr/bin/env node
// Rewrites every README block marked `<!-- example: <file> -->` with the file's current text.
// `npm test` fails while the README and the files differ (packages/testing/test/Readme.test.ts);
// run `node scripts/sync-readme-examples.mjs` after changing an example.
import { readFileSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const path = join(root, "README.md")
const readme = readFileSync(path, "utf8")
const synced = readme.replace(/<!-- example: (\S+) -->\n```ts\n[\s\S]*?```/g, (_, file) =>
  `<!-- example: ${file} -->\n\`\`\`ts\n${readFileSync(join(root, file), "utf8")}\`\`\``)
if (synced !== readme) writeFileSync(path, synced)
console.log(synced === readme ? "README examples already in sync" : "README examples synced")
