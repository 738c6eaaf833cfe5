// The README's example of mounting the admin page, run: only staff reach it, and the name
// the application gives them is what an action logs.
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import { createServer } from "node:http"
import { routes, type SessionLookup } from "../examples/mount.js"
import { freshTopic, portOf, Substrate } from "./support.js"

const logged: Array<string> = []

// A stand-in for the application's session: the test's requests say who they are.
const sessionUser: SessionLookup = (request) =>
  Effect.succeed(
    request.headers["x-test-session"] === "alice" ?
      { name: "alice", staff: true }
      : request.headers["x-test-session"] === "bob" ?
      { name: "bob", staff: false }
      : undefined
  )

const Live = HttpRouter.serve(routes(sessionUser)).pipe(
  Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" })),
  Layer.provide(Logger.layer([Logger.make(({ message }) => void logged.push(String(message)))])),
  Layer.provideMerge(Substrate)
)

const request = (path: string, session?: string, init: RequestInit = {}) =>
  Effect.flatMap(HttpServer.HttpServer, (server) =>
    Effect.promise(async () => {
      const headers = {
        ...(session === undefined ? {} : { "x-test-session": session }),
        ...(init.headers as Record<string, string>)
      }
      const response = await fetch(`http://127.0.0.1:${portOf(server)}${path}`, { ...init, headers })
      return { status: response.status, body: await response.text() }
    }))

describe("README example: the admin page mounted in an application", () => {
  it.layer(Live, { timeout: "60 seconds" })((it) => {
    it.effect("only staff reach the page; the application's own routes are untouched; actions log the staff member", () =>
      Effect.gen(function*() {
        expect((yield* request("/")).body).toBe("orders service")
        expect((yield* request("/admin/durable/")).status).toBe(403)
        expect((yield* request("/admin/durable/", "bob")).status).toBe(403)
        const page = yield* request("/admin/durable/", "alice")
        expect(page.status).toBe(200)
        expect(page.body).toContain(`href="/admin/durable/messages"`)
        const topic = freshTopic("mounted")
        const paused = yield* request("/admin/durable/actions/pause", "alice", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ topic })
        })
        expect(paused.status).toBe(200)
        expect(logged.some((line) => line.startsWith(`effect-durable admin: pause topic ${topic} by alice from `)))
          .toBe(true)
      }))
  })
})
