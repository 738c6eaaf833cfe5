// Prints a TCP port on 127.0.0.1 that is free now (the kernel picks it). The CI's servers
// (scripts/system-postgres.sh, scripts/pgbouncer.sh) take their port from here instead of a
// fixed number: a fixed port inside the ephemeral range (32768-60999 on Linux) can be held by
// any outgoing connection of the machine, which is how a CI run once failed with "Address
// already in use". Another process can still take the port before the server binds it, so the
// scripts retry with a new one when the bind fails.
import { createServer } from "node:net"

const server = createServer()
server.listen(0, "127.0.0.1", () => {
  const address = server.address()
  server.close(() => console.log(typeof address === "object" && address !== null ? address.port : ""))
})
