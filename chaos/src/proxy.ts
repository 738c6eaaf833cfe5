/**
 * A TCP proxy on 127.0.0.1 between the producer and PostgreSQL (or PgBouncer) that can cut a
 * connection right after the client sends COMMIT: the client never learns whether its
 * transaction committed (an ambiguous commit). It reads the PostgreSQL wire protocol only
 * far enough to find message boundaries and COMMIT statements; everything else passes as is.
 */
import { connect, createServer, type Server, type Socket } from "node:net"

/**
 * `forward`: the server receives the COMMIT before its connection is closed, so it commits;
 * `drop`: the COMMIT never reaches the server, which rolls the transaction back when the
 * connection closes. Either way the client sees its connection die at COMMIT.
 */
export type CutMode = "forward" | "drop"

export interface Cut {
  readonly mode: CutMode
  /** When the connection was cut (epoch ms). */
  readonly at: number
}

export interface CommitCutProxy {
  readonly port: number
  /** Cuts the connection that sends the next COMMIT; resolves once it is cut. */
  readonly cutNextCommit: (mode: CutMode) => Promise<Cut>
  /** Forgets cuts asked for and not made (their promises never resolve). */
  readonly disarm: () => void
  /** Closes the listener and every connection. */
  readonly close: () => Promise<void>
}

// Protocol codes of the untyped first messages (they have no type byte).
const SSL_REQUEST = 80877103
const GSSENC_REQUEST = 80877104

const cString = (body: Buffer, from: number): { readonly text: string; readonly end: number } | undefined => {
  const end = body.indexOf(0, from)
  return end < 0 ? undefined : { text: body.toString("utf8", from, end), end }
}

const COMMIT_TEXT = /^\s*(COMMIT|END)\b/i

/**
 * Splits the client's byte stream into whole messages and hands on the complete ones, with
 * the offset just past the first COMMIT among them. A partial message waits for its rest.
 *
 * A COMMIT is a simple query (`Q`), or in the extended protocol the Parse of one or the Bind of
 * a statement prepared as one earlier on this connection (a driver that prepares statements by
 * name sends COMMIT's text once per connection, then only binds it). For the extended protocol
 * the offset is past the Sync that ends the COMMIT's pipeline, so that a forwarded cut carries
 * its Execute: the server commits, and the client never hears of it.
 */
const frontendReader = (onMessages: (bytes: Buffer, commitAt: number | undefined) => void) => {
  let pending: Buffer = Buffer.alloc(0)
  // Before the startup message, messages carry no type byte.
  let startup = true
  // Names of the statements this connection prepared as COMMIT.
  const commitStatements = new Set<string>()
  return (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk])
    let offset = 0
    let commitEnd: number | undefined
    let extendedCommit = false
    while (true) {
      if (startup) {
        if (pending.length - offset < 8) break
        const length = pending.readInt32BE(offset)
        if (pending.length - offset < length) break
        const code = pending.readInt32BE(offset + 4)
        // After an SSL or GSS request the client sends its startup message again.
        if (code !== SSL_REQUEST && code !== GSSENC_REQUEST) startup = false
        offset += length
        continue
      }
      if (pending.length - offset < 5) break
      const type = pending[offset]!
      const length = pending.readInt32BE(offset + 1)
      if (pending.length - offset < 1 + length) break
      const end = offset + 1 + length
      const body = pending.subarray(offset + 5, end)
      if (type === 0x51 /* Q */) {
        if (
          commitEnd === undefined && !extendedCommit &&
          COMMIT_TEXT.test(body.toString("utf8", 0, Math.max(0, body.length - 1)))
        ) {
          commitEnd = end
        }
      } else if (type === 0x50 /* P: statement name, query text */) {
        const name = cString(body, 0)
        const query = name === undefined ? undefined : cString(body, name.end + 1)
        if (name !== undefined && query !== undefined && COMMIT_TEXT.test(query.text)) {
          if (name.text !== "") commitStatements.add(name.text)
          extendedCommit = true
        } else if (name !== undefined) commitStatements.delete(name.text)
      } else if (type === 0x42 /* B: portal name, statement name, ... */) {
        const portal = cString(body, 0)
        const statement = portal === undefined ? undefined : cString(body, portal.end + 1)
        if (statement !== undefined && commitStatements.has(statement.text)) extendedCommit = true
      } else if (type === 0x53 /* S: Sync */ && extendedCommit && commitEnd === undefined) {
        commitEnd = end
      }
      offset = end
    }
    const complete = pending.subarray(0, offset)
    pending = Buffer.from(pending.subarray(offset))
    if (complete.length > 0) onMessages(complete, commitEnd)
  }
}

export const start = (upstream: { readonly host: string; readonly port: number }): Promise<CommitCutProxy> =>
  new Promise((resolve, reject) => {
    const sockets = new Set<Socket>()
    const armed: Array<{ readonly mode: CutMode; readonly done: (cut: Cut) => void }> = []
    const track = (socket: Socket) => {
      sockets.add(socket)
      socket.on("close", () => sockets.delete(socket))
      // A reset from either side just ends the pair; the client sees its connection die.
      socket.on("error", () => undefined)
    }
    const server: Server = createServer((client) => {
      const backend = connect(upstream.port, upstream.host)
      track(client)
      track(backend)
      client.on("close", () => backend.destroy())
      backend.on("close", () => client.destroy())
      backend.pipe(client)
      const read = frontendReader((bytes, commitEnd) => {
        const cut = commitEnd === undefined ? undefined : armed.shift()
        if (cut === undefined) {
          backend.write(bytes)
          return
        }
        if (cut.mode === "forward") {
          // The COMMIT goes out, then the FIN: the server commits, its answer goes nowhere.
          backend.end(bytes.subarray(0, commitEnd))
        } else {
          // Nothing of it reaches the server: the connection closes inside the transaction.
          backend.destroy()
        }
        client.destroy()
        cut.done({ mode: cut.mode, at: Date.now() })
      })
      client.on("data", (chunk: Buffer) => {
        if (!client.destroyed) read(chunk)
      })
    })
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      if (address === null || typeof address !== "object") return reject(new Error("proxy: no address"))
      resolve({
        port: address.port,
        cutNextCommit: (mode) => new Promise((done) => armed.push({ mode, done })),
        disarm: () => void armed.splice(0),
        close: () =>
          new Promise((closed) => {
            for (const socket of sockets) socket.destroy()
            server.close(() => closed())
          })
      })
    })
  })
