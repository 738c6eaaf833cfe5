#!/usr/bin/env bash
# The consumer test: what someone who installs effect-durable from npm gets.
# Packs every library package (npm pack) into a scratch project outside the workspace, then
# runs the README's own install lines there VERBATIM (the `npm install` lines of its
# "Installing" block; only the @effect-durable/* names, which are not on the registry yet,
# become the tarballs), so effect and every other peer resolve from the registry, unpinned,
# as `npm install effect` would give a new user today. Then: no engine warning, a sound tree,
# one copy of effect, an application file type-checked against the shipped declarations,
# and scripts/consumer/program.mjs run with plain node (ledger, outbox, projector, HTTP, the
# CLI) on the development database, and on DATABASE_URL as well when it is set. Deletes
# everything it made on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Every library package of the workspace (each packages/* folder whose package.json is not
# private), read from the tree so a new package is never left out of the test.
mapfile -t PACKAGES < <(cd "$root" && node -e '
  const fs = require("node:fs")
  for (const name of fs.readdirSync("packages").sort()) {
    const manifest = "packages/" + name + "/package.json"
    if (fs.existsSync(manifest) && JSON.parse(fs.readFileSync(manifest, "utf8")).private !== true) console.log(name)
  }')
[ "${#PACKAGES[@]}" -gt 0 ] || { echo "consumer: no package found under packages/" >&2; exit 1; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/effect-durable-consumer-XXXXXX")
cleanup() {
  # The development database stops with the program; a guardian stops it if the program dies.
  rm -rf "$scratch"
}
trap cleanup EXIT
# A project folder others may enter: as root, PostgreSQL runs as the postgres user.
chmod 755 "$scratch"

cd "$root"
# Every package carries the same version.
version=$(node -p 'require("./packages/core/package.json").version')
npm run build --silent
mkdir "$scratch/packs"
for name in "${PACKAGES[@]}"; do
  npm pack --silent --workspace "packages/$name" --pack-destination "$scratch/packs" >/dev/null
done

# The README's install lines, as written.
install_lines=$(node - "$root/README.md" <<'NODE'
const text = require("node:fs").readFileSync(process.argv[2], "utf8")
const block = text.match(/### Installing[^\n]*\n[\s\S]*?```sh\n([\s\S]*?)```/)
if (block === null) { console.error("consumer: README has no Installing block"); process.exit(1) }
const lines = block[1].split("\n").map((l) => l.replace(/\s+#.*$/, "").trim()).filter((l) => l.startsWith("npm install"))
if (lines.length === 0) { console.error("consumer: the Installing block has no npm install line"); process.exit(1) }
console.log(lines.join("\n"))
NODE
)

platform=$(node -p 'process.platform + "-" + process.arch')
node - "$scratch" "$platform" "${PACKAGES[@]}" <<'NODE'
const [scratch, platform, ...names] = process.argv.slice(2)
const fs = require("node:fs")
const packs = fs.readdirSync(scratch + "/packs")
// Every tarball up front, so a package's @effect-durable/* peers resolve to the tarballs
// (they are not on the registry); the README's lines then add what an application adds.
const dependencies = {}
for (const name of names) {
  // Exactly this package's tarball (workflow's name is the start of workflow-http's).
  const file = packs.find((f) => new RegExp("^effect-durable-" + name + "-\\d").test(f))
  dependencies["@effect-durable/" + name] = "file:packs/" + file
}
fs.writeFileSync(scratch + "/package.json", JSON.stringify({
  name: "effect-durable-consumer",
  private: true,
  type: "module",
  dependencies,
  // embedded-postgres's platform package restores its binaries' symlinks in an install script.
  allowScripts: { ["@embedded-postgres/" + platform]: true, "msgpackr-extract": false }
}, null, 2))
NODE
cp scripts/consumer/program.mjs scripts/consumer/types.ts "$scratch/"
cat > "$scratch/tsconfig.json" <<'JSON'
{
  "compilerOptions": {
    "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext", "types": ["node"],
    "strict": true, "skipLibCheck": false, "noEmit": true
  },
  "files": ["types.ts"]
}
JSON

cd "$scratch"
: > install.log
while IFS= read -r line; do
  # shellcheck disable=SC2001
  command=$(sed -E "s#@effect-durable/([a-z][a-z-]*)#$scratch/packs/effect-durable-\\1-$version.tgz#g" <<<"$line")
  echo "== consumer: $line"
  eval "$command --no-audit --no-fund" 2>&1 | tee -a install.log
done <<<"$install_lines"
# What the check needs on top of an application's own install.
npm install -D --no-audit --no-fund typescript @types/node 2>&1 | tee -a install.log
if grep -q EBADENGINE install.log; then echo "consumer: the install printed EBADENGINE" >&2; exit 1; fi
npm ls --all >/dev/null || { echo "consumer: npm ls reports a broken tree (a missing or invalid peer?)" >&2; exit 1; }
copies=$(npm ls effect --all --parseable | sort -u | wc -l)
[ "$copies" -eq 1 ] || { echo "consumer: $copies copies of effect installed; an application must get one" >&2; npm ls effect --all; exit 1; }
# Nor a second copy of any @effect/* package (a package pinning one exactly brings its own).
duplicated=$(find ./node_modules -regextype posix-extended -regex '.*/node_modules/@effect/[^/]+/package\.json' \
  | sed -E 's#.*/node_modules/(@effect/[^/]+)/package.json#\1#' | sort | uniq -d)
if [ -n "$duplicated" ]; then
  echo "consumer: more than one copy installed of: $duplicated" >&2
  for name in $duplicated; do npm ls "$name" --all; done
  exit 1
fi
scoped=$(find ./node_modules -regextype posix-extended -regex '.*/node_modules/@effect/[^/]+/package\.json' \
  | sed -E 's#.*/node_modules/(@effect/[^/]+)/package.json#\1#' | sort -u | tr '\n' ' ')
echo "== consumer: one copy each of ${scoped}"
latest=$(npm view effect dist-tags.latest)
installed=$(node -p 'require("effect/package.json").version')
[ "$installed" = "$latest" ] || { echo "consumer: effect $installed installed, latest is $latest" >&2; exit 1; }
echo "== consumer: effect $installed (the registry's latest), one copy"
[ ! -e node_modules/@effect-durable/pg/node_modules ] || { echo "consumer: a package brought its own node_modules" >&2; exit 1; }

# Not exactOptionalPropertyTypes: @nats-io's own declarations do not pass it.
echo "== consumer: tsc (strict, NodeNext, skipLibCheck off)"
node_modules/.bin/tsc -p tsconfig.json

echo "== consumer: node program.mjs on the development database"
export EFFECT_DURABLE_PACKAGES="${PACKAGES[*]}"
env -u DATABASE_URL node program.mjs
if [ -n "${DATABASE_URL:-}" ]; then
  echo "== consumer: node program.mjs on DATABASE_URL"
  node program.mjs
fi
echo "== consumer test passed"
