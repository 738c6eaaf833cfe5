// npm run circular: no import cycle among the sources of any package, the bench or the chaos
// suite. A cycle made only of `import type` edges is allowed (it is erased at compile time and
// cannot change the order modules are evaluated in), as in Effect's own repository.
import madge from "madge"
import { readdirSync } from "node:fs"
import { join } from "node:path"

const roots = [
  ...readdirSync("packages").map((name) => join("packages", name, "src")),
  "examples/jobs/src",
  "chaos/src",
  "bench/src"
]

const result = await madge(roots, {
  fileExtensions: ["ts"],
  excludeRegExp: [/\.d\.ts$/, /node_modules/, /dist\//],
  detectiveOptions: { ts: { skipTypeImports: true }, tsx: { skipTypeImports: true } },
  tsConfig: "tsconfig.base.json"
})
const cycles = result.circular()
const files = Object.keys(result.obj()).length
if (cycles.length > 0) {
  console.error(`${cycles.length} import cycle(s) among ${files} files:`)
  for (const cycle of cycles) console.error(`  ${[...cycle, cycle[0]].join(" -> ")}`)
  process.exit(1)
}
if (files < 100) {
  // Guard against a silent resolution failure (every import unresolved reads as "no cycle").
  console.error(`only ${files} files were read: the roots or the resolution are wrong`)
  process.exit(1)
}
console.log(`no import cycle among ${files} files (type-only edges skipped)`)
