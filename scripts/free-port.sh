# Sourced by the CI's server scripts (system-postgres.sh, pgbouncer.sh): starts a server on a
# port the kernel reports free instead of a fixed number. A fixed port inside the ephemeral range
# (32768-60999 on Linux) can be held by any outgoing connection of the machine, which is how a
# CI run once failed with "Address already in use". Another process can still take the port
# between the pick and the server's bind, so a failed start is retried on a new port.
#
#   on_free_port LISTEN   runs `LISTEN <port>` (which starts the server and fails if it cannot)
#                         on $PORT when it is set, else on free ports, at most 5 tries; sets PORT.

# A TCP port on 127.0.0.1 that is free now.
free_port() {
  node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { const { port } = s.address(); s.close(() => console.log(port)) })'
}

on_free_port() {
  local listen=$1 attempt
  if [ -n "${PORT:-}" ]; then
    "$listen" "$PORT"
    return
  fi
  for attempt in 1 2 3 4 5; do
    PORT=$(free_port)
    if "$listen" "$PORT"; then return 0; fi
    echo "$(basename "$0"): port $PORT was taken, trying another" >&2
  done
  return 1
}
