// What the webhook suites share: a migrated substrate in a fresh database and a real HTTP
// receiver on 127.0.0.1. Row reads and waits come from `@effect-durable/testing`.
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
export { eventually } from "@effect-durable/testing/Eventually"
export { outboxRows } from "@effect-durable/testing/TestSubstrate"
import * as Effect from "effect/Effect"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"

export const substrate = () =>
  TestSubstrate.layer({ database: { maxConnections: 16, applicationName: "webhook-test" } })

export interface Received {
  readonly url: string
  readonly headers: IncomingMessage["headers"]
  /** The raw body, as a receiver verifies it. */
  readonly body: string
}

/**
 * A real HTTP server on 127.0.0.1 that records requests and answers with `respond`; closed
 * (its connections too) when the scope closes.
 */
export const server = (respond: (request: Received, res: ServerResponse) => void) =>
  Effect.map(
    Effect.acquireRelease(
      Effect.callback<{ url: string; received: Array<Received>; close: () => Promise<void> }>((resume) => {
        const received: Array<Received> = []
        const http = createServer((req, res) => {
          let body = ""
          req.on("data", (chunk) => (body += chunk))
          req.on("end", () => {
            const request = { url: req.url ?? "", headers: req.headers, body }
            received.push(request)
            respond(request, res)
          })
        })
        http.listen(0, "127.0.0.1", () =>
          resume(Effect.succeed({
            url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/hook`,
            received,
            close: () =>
              new Promise<void>((resolve) => {
                http.closeAllConnections()
                http.close(() => resolve())
              })
          })))
      }),
      (s) => Effect.promise(s.close)
    ),
    ({ received, url }) => ({ received, url })
  )
