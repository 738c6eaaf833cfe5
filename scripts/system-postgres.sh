#!/usr/bin/env bash
# Runs Debian's PostgreSQL 15 (package postgresql-15) as a throwaway server for CI:
#   scripts/system-postgres.sh start   installs it if needed, starts it, prints DATABASE_URL
#   scripts/system-postgres.sh stop    stops it and deletes its data directory
# The server runs as a dedicated OS user (PostgreSQL refuses root), listens on 127.0.0.1
# only, and keeps everything (data, socket, log) in one directory under the temp dir. Its port
# is PG_SYSTEM_PORT if set, else a free one (scripts/free-port.sh), retried if another process
# binds it first.
set -euo pipefail
# shellcheck source=free-port.sh
. "$(dirname "$0")/free-port.sh"

VERSION=${PG_SYSTEM_VERSION:-15}
PORT=${PG_SYSTEM_PORT:-}
OS_USER=effect_durable_pg
STATE=${TMPDIR:-/tmp}/effect-durable-system-pg-$VERSION
BIN=/usr/lib/postgresql/$VERSION/bin
as_user() { runuser -u "$OS_USER" -- "$@"; }

start() {
  if [ ! -x "$BIN/postgres" ]; then
    echo "installing postgresql-$VERSION" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-$VERSION" >&2
  fi
  id -u "$OS_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$OS_USER"
  stop >/dev/null 2>&1 || true
  mkdir -p "$STATE"
  chown "$OS_USER" "$STATE"
  local password
  password=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
  printf '%s\n' "$password" > "$STATE/pwfile"
  chown "$OS_USER" "$STATE/pwfile"
  as_user "$BIN/initdb" -D "$STATE/data" -U postgres --pwfile="$STATE/pwfile" --auth=scram-sha-256 \
    --encoding=UTF8 --no-sync >"$STATE/initdb.log" 2>&1 || { cat "$STATE/initdb.log" >&2; exit 1; }
  rm -f "$STATE/pwfile"
  on_free_port listen || exit 1
  echo "postgres://postgres:$password@127.0.0.1:$PORT/postgres"
}

# Starts the server on port $1 and waits until it accepts connections; fails (its log on
# stderr) if it cannot.
listen() {
  rm -f "$STATE/server.log"
  as_user "$BIN/pg_ctl" -D "$STATE/data" -l "$STATE/server.log" -w -t 60 start -o \
    "-p $1 -c listen_addresses=127.0.0.1 -c unix_socket_directories=$STATE -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" >&2 \
    || { cat "$STATE/server.log" >&2; return 1; }
}

stop() {
  if [ -d "$STATE/data" ]; then
    as_user "$BIN/pg_ctl" -D "$STATE/data" -m fast -w stop >&2 || true
  fi
  rm -rf "$STATE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
