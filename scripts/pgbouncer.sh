#!/usr/bin/env bash
# PgBouncer (Debian package pgbouncer, 1.18) in transaction pooling mode in front of a
# PostgreSQL, for the pooler pass of CI and the chaos suite:
#   scripts/pgbouncer.sh start [URL]   URL (default $DATABASE_URL) is a superuser URL of the
#                                      server; prints the same URL pointing at the pooler
#   scripts/pgbouncer.sh stop          stops it and deletes its directory
# Any role can log in (auth_user + auth_query read the role's SCRAM secret from pg_shadow,
# which needs the server to authenticate with scram-sha-256), and any database name is
# routed (a wildcard entry), so per-suite fresh databases work without a restart.
# It listens on 127.0.0.1 only and runs as a dedicated OS user (PgBouncer refuses root);
# its config, log and pid file live in one directory.
# Settings: PGBOUNCER_PORT (default: a free port, scripts/free-port.sh, retried if another
# process binds it first), PGBOUNCER_STATE (its directory),
# PGBOUNCER_POOL_SIZE (server connections per database and role, default 20).
set -euo pipefail
# shellcheck source=free-port.sh
. "$(dirname "$0")/free-port.sh"

PORT=${PGBOUNCER_PORT:-}
STATE=${PGBOUNCER_STATE:-${TMPDIR:-/tmp}/effect-durable-pgbouncer}
POOL_SIZE=${PGBOUNCER_POOL_SIZE:-20}
OS_USER=effect_durable_pgbouncer
BIN=/usr/sbin/pgbouncer
as_user() { runuser -u "$OS_USER" -- "$@"; }

start() {
  local url=${1:-${DATABASE_URL:-}}
  if [ -z "$url" ]; then
    echo "usage: $0 start URL (or set DATABASE_URL): a superuser URL of the PostgreSQL to pool" >&2
    exit 2
  fi
  if [ ! -x "$BIN" ]; then
    echo "installing pgbouncer" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >&2
  fi
  id -u "$OS_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$OS_USER"
  stop >/dev/null 2>&1 || true
  # The URL's parts, decoded (a password may hold URL escapes); node is there wherever npm is.
  local parts host port user password
  parts=$(node -e '
    const u = new URL(process.argv[1])
    const out = [u.hostname || "127.0.0.1", u.port || "5432", decodeURIComponent(u.username), decodeURIComponent(u.password)]
    if (out.some((part) => /[\s"]/.test(part))) { console.error("pgbouncer.sh: host, user and password must not contain spaces or quotes"); process.exit(2) }
    console.log(out.join("\n"))' "$url")
  { read -r host; read -r port; read -r user; read -r password; } <<<"$parts"
  mkdir -p "$STATE"
  chmod 700 "$STATE"
  # auth_user's own password, used for the auth_query connection and for its own logins.
  printf '"%s" "%s"\n' "$user" "$password" > "$STATE/userlist.txt"
  cat > "$STATE/pgbouncer.ini" <<EOF
[databases]
* = host=$host port=$port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 0
unix_socket_dir =
pool_mode = transaction
auth_type = scram-sha-256
auth_file = $STATE/userlist.txt
auth_user = $user
auth_query = SELECT usename, passwd FROM pg_shadow WHERE usename = \$1
admin_users = $user
default_pool_size = $POOL_SIZE
max_client_conn = 2000
; node-postgres sends only parameters PgBouncer tracks; psql and JDBC send this one.
ignore_startup_parameters = extra_float_digits
; A server connection that died (a restart, a terminated backend) is replaced at once.
server_login_retry = 1
logfile = $STATE/pgbouncer.log
pidfile = $STATE/pgbouncer.pid
EOF
  chown -R "$OS_USER" "$STATE"
  on_free_port listen || exit 1
  node -e 'const u = new URL(process.argv[1]); u.hostname = "127.0.0.1"; u.port = process.argv[2]; console.log(u.toString())' "$url" "$PORT"
}

# Starts PgBouncer on port $1 and waits until it accepts connections; fails (its log on
# stderr) if it cannot.
listen() {
  local port=$1
  sed -i "s/^listen_port = .*/listen_port = $port/" "$STATE/pgbouncer.ini"
  rm -f "$STATE/pgbouncer.log"
  as_user "$BIN" -d "$STATE/pgbouncer.ini" >&2 || { cat "$STATE/pgbouncer.log" >&2 2>/dev/null; return 1; }
  local i=0
  # Its own log must say it listens there: another program on that port would accept too.
  until grep -qF "listening on 127.0.0.1:$port" "$STATE/pgbouncer.log" 2>/dev/null \
    && node -e 'require("net").connect(+process.argv[1], "127.0.0.1").on("connect", () => process.exit(0)).on("error", () => process.exit(1))' "$port" 2>/dev/null; do
    if grep -qF "nowhere to listen" "$STATE/pgbouncer.log" 2>/dev/null; then
      cat "$STATE/pgbouncer.log" >&2
      stop_process
      return 1
    fi
    i=$((i + 1))
    if [ $i -ge 50 ]; then
      echo "pgbouncer did not start listening on 127.0.0.1:$port" >&2
      cat "$STATE/pgbouncer.log" >&2 2>/dev/null || true
      stop_process
      return 1
    fi
    sleep 0.1
  done
}

# Stops the running PgBouncer, if any (its directory stays).
stop_process() {
  if [ -f "$STATE/pgbouncer.pid" ]; then
    local pid
    pid=$(cat "$STATE/pgbouncer.pid")
    # SIGTERM: immediate shutdown (SIGINT would wait for clients to leave).
    kill -TERM "$pid" 2>/dev/null || true
    local i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$STATE/pgbouncer.pid"
  fi
}

stop() {
  stop_process
  rm -rf "$STATE"
}

case "${1:-}" in
  start) start "${2:-}" ;;
  stop) stop ;;
  *) echo "usage: $0 start [URL]|stop" >&2; exit 2 ;;
esac
