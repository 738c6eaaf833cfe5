// `npm run schema:release`: marks every version up to the latest released, as a release tag
// does for the code. Each unreleased version's module is rewritten as frozen text — its
// statements as they are today, with only the schema's tables left to fill in, and no import
// but its types — RELEASED_THROUGH moves to the latest version, and the released checksums
// test (packages/pg/test/Migrations.test.ts) records their checksums. Run it on the commit
// that is tagged; every later schema change is then a new version.
import { readFileSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import * as Migrations from "../src/Migrations.js"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const folder = join(root, "src", "internal", "migrations")
const MARK = "\u0000table:"

const frozen = (migration: Migrations.Migration, header: string) => {
  const statements = migration.statements((table) => `${MARK}${table}\u0000`)
  const literal = (statement: string) =>
    "`" + statement.replaceAll("\\", "\\\\").replaceAll("`", "\\`").replaceAll("${", "\\${")
      .replace(/\u0000table:([a-z_]+)\u0000/g, (_, table: string) => "${t(\"" + table + "\")}") +
    "`"
  return `${header}
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: ${migration.version},
  name: ${JSON.stringify(migration.name)},
  statements: (t) => [
${statements.map((statement) => `    ${literal(statement)}`).join(",\n")}
  ]
}
`
}

const index = join(folder, "index.ts")
const latest = Migrations.latestVersion
for (const migration of Migrations.migrations.filter((m) => m.version > Migrations.releasedThrough)) {
  const file = `${String(migration.version).padStart(4, "0")}_${migration.name.replace(/\W+/g, "_")}.ts`
  const source = readFileSync(join(folder, file), "utf8")
  const header = /^\/\*\*[\s\S]*?\*\//.exec(source)?.[0] ?? ""
  writeFileSync(
    join(folder, file),
    frozen(
      migration,
      header.replace(
        / \* Unreleased while[\s\S]*?(?=\n \*\/)/,
        " * Released: frozen text, never edited (a test holds its checksum); a change is the next version."
      )
    )
  )
  console.log(`froze version ${migration.version} (${file}), checksum ${Migrations.checksum(migration)}`)
}
writeFileSync(
  index,
  readFileSync(index, "utf8").replace(
    /export const RELEASED_THROUGH = \d+/,
    `export const RELEASED_THROUGH = ${latest}`
  )
)
const test = join(root, "test", "Migrations.test.ts")
const hashes = Migrations.migrations.map((m) => `  ${m.version}: "${Migrations.checksum(m)}"`).join(",\n")
writeFileSync(
  test,
  readFileSync(test, "utf8").replace(
    /const RELEASED_DDL: Readonly<Record<number, string>> = \{[\s\S]*?\n?\}/,
    `const RELEASED_DDL: Readonly<Record<number, string>> = {\n${hashes}\n}`
  )
)
console.log(`released through version ${latest}: tag this commit`)
