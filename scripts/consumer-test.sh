#!/usr/bin/env bash
# The consumer test: what someone who installs effect-durable from npm gets.
# Packs every library package (npm pack), installs the tarballs and their peers from the
# registry into a scratch project outside the workspace (no workspace links, no tsx, no
# --conditions), type-checks an application file against the shipped declarations, and runs
# scripts/consumer/program.mjs with plain node: on the development database (from the packed
# @effect-durable/embedded), and on DATABASE_URL as well when it is set. Deletes everything
# it made on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PACKAGES=(core embedded pg projector nats http testing)

scratch=$(mktemp -d "${TMPDIR:-/tmp}/effect-durable-consumer-XXXXXX")
cleanup() {
  # The development database stops with the program; a guardian stops it if the program dies.
  rm -rf "$scratch"
}
trap cleanup EXIT
# A project folder others may enter: as root, PostgreSQL runs as the postgres user.
chmod 755 "$scratch"

cd "$root"
npm run build --silent
mkdir "$scratch/packs"
for name in "${PACKAGES[@]}"; do
  npm pack --silent --workspace "packages/$name" --pack-destination "$scratch/packs" >/dev/null
done

# The peers at the versions the workspace tests (the ranges the packages declare allow newer).
version() { node -p "require('./package-lock.json').packages['node_modules/$1'].version"; }
platform=$(node -p 'process.platform + "-" + process.arch')
node - "$scratch" "$platform" "${PACKAGES[@]}" <<NODE
const [scratch, platform, ...names] = process.argv.slice(2)
const fs = require("node:fs")
const packs = fs.readdirSync(scratch + "/packs")
const dependencies = {}
for (const name of names) {
  const file = packs.find((f) => f.startsWith("effect-durable-" + name + "-"))
  dependencies["@effect-durable/" + name] = "file:packs/" + file
}
Object.assign(dependencies, {
  "effect": "$(version effect)",
  "@effect/sql": "$(version @effect/sql)",
  "@effect/sql-pg": "$(version @effect/sql-pg)",
  "@effect/platform": "$(version @effect/platform)",
  "@effect/experimental": "$(version @effect/experimental)"
})
fs.writeFileSync(scratch + "/package.json", JSON.stringify({
  name: "effect-durable-consumer",
  private: true,
  type: "module",
  dependencies,
  // @types/pg: @effect/sql-pg's declarations import pg's types.
  devDependencies: { typescript: "$(version typescript)", "@types/node": "$(version @types/node)", "@types/pg": "$(version @types/pg)" },
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
echo "== consumer: npm install (tarballs + peers from the registry) in $scratch"
npm install --no-audit --no-fund 2>&1 | tee install.log
if grep -q EBADENGINE install.log; then echo "consumer: the install printed EBADENGINE" >&2; exit 1; fi
npm ls --all >/dev/null || { echo "consumer: npm ls reports a broken tree (a missing or invalid peer?)" >&2; exit 1; }
copies=$(npm ls effect --all --parseable | sort -u | wc -l)
[ "$copies" -eq 1 ] || { echo "consumer: $copies copies of effect installed; an application must get one" >&2; npm ls effect --all; exit 1; }
[ ! -e node_modules/@effect-durable/pg/node_modules ] || { echo "consumer: a package brought its own node_modules" >&2; exit 1; }

# Not exactOptionalPropertyTypes: @nats-io's own declarations do not pass it.
echo "== consumer: tsc (strict, NodeNext, skipLibCheck off)"
node_modules/.bin/tsc -p tsconfig.json

echo "== consumer: node program.mjs on the development database"
env -u DATABASE_URL node program.mjs
if [ -n "${DATABASE_URL:-}" ]; then
  echo "== consumer: node program.mjs on DATABASE_URL"
  node program.mjs
fi
echo "== consumer test passed"
