// The two size limits: a request body over `maxRequestBytes` is 413 before anything runs,
// whether or not it declares its length, and every client reads that 413 (the body is
// received whole before it, so closing the connection resets nothing); a response over
// `maxResponseBytes` is never "committed but not replayable": it is rolled back and answered 500.
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as Http from "node:http"
import * as Net from "node:net"
import { executions, freshAccount, json, port, recordsOf, send, server, transfersOf } from "./support.js"

const LIMIT = 64 * 1024
const MiB = 1024 * 1024

/** What a client made of one request: the status it read, and any error its connection had, to its close. */
interface Outcome {
  readonly status: number | undefined
  readonly error: string | undefined
}

/** `{"tree": ...}` with `levels` nested children: 1 + 2 × levels arrays and objects deep. */
const treeBody = (levels: number) => `{"tree":${`{"children":[`.repeat(levels)}${"]}".repeat(levels)}}`

const headersFor = (key: string) => ({
  "content-type": "application/json",
  "idempotency-key": key,
  authorization: "Bearer user-alice"
})

/** node:http with the body in one write; settles when the connection closed, with every error it had. */
const viaNodeHttp = (p: number, path: string, body: Buffer, key: string): Promise<Outcome> =>
  new Promise((resolve) => {
    let status: number | undefined
    let error: string | undefined
    const req = Http.request({
      host: "127.0.0.1",
      port: p,
      path,
      method: "POST",
      agent: false,
      headers: { ...headersFor(key), "content-length": String(body.length) }
    }, (res) => {
      res.on("data", () => {})
      res.on("end", () => status = res.statusCode)
      res.on("error", (e: NodeJS.ErrnoException) => error ??= e.code ?? e.message)
    })
    req.on("error", (e: NodeJS.ErrnoException) => error ??= e.code ?? e.message)
    req.on("close", () => resolve({ status, error }))
    req.end(body)
  })

/** fetch (undici, keep-alive pool), which sends Content-Length for a Buffer body. */
const viaFetch = (p: number, path: string, body: Buffer, key: string): Promise<Outcome> =>
  fetch(`http://127.0.0.1:${p}${path}`, { method: "POST", body, headers: headersFor(key) }).then(
    async (res) => ({ status: (await res.text(), res.status), error: undefined }),
    (e: Error & { cause?: { code?: string } }) => ({ status: undefined, error: e.cause?.code ?? e.message })
  )

/**
 * A client that sends its whole body before it reads the answer (as urllib3 and many others do)
 * over a slow link: 64 KiB every 20 ms, so the upload outlasts NodeHttpServer's 500 ms close
 * grace. The pace is the scenario, not a wait for an outcome. The server's FIN does not stop
 * it (a half-open socket: such a client is busy sending): a reset shows as an error.
 */
const viaSlowWholeBodyClient = (p: number, path: string, size: number, key: string): Promise<Outcome> =>
  new Promise((resolve) => {
    const socket = Net.connect({ port: p, host: "127.0.0.1", allowHalfOpen: true })
    const received: Array<Buffer> = []
    let error: string | undefined
    let sent = 0
    let answered = false
    // It closes its side once it has sent the whole body and the server closed its own.
    const closeWhenDone = () => {
      if (answered && sent >= size) socket.end()
    }
    socket.on("data", (chunk: Buffer) => received.push(chunk))
    socket.on("end", () => {
      answered = true
      closeWhenDone()
    })
    socket.on("error", (e: NodeJS.ErrnoException) => error ??= e.code ?? e.message)
    socket.on("close", () => {
      const statusLine = /^HTTP\/1\.1 (\d{3}) /.exec(Buffer.concat(received).toString("latin1"))
      resolve({ status: statusLine === null ? undefined : Number(statusLine[1]), error })
    })
    const head = Object.entries({ ...headersFor(key), host: "127.0.0.1", "content-length": String(size) })
      .map(([name, value]) => `${name}: ${value}\r\n`).join("")
    socket.write(`POST ${path} HTTP/1.1\r\n${head}\r\n`)
    const next = () => {
      if (socket.destroyed) return
      if (sent >= size) return closeWhenDone()
      const chunk = Buffer.alloc(Math.min(64 * 1024, size - sent), 120)
      sent += chunk.length
      socket.write(chunk, () => setTimeout(next, 20))
    }
    next()
  })

describe("size limits", () => {
  it.layer(server({ maxRequestBytes: LIMIT, maxResponseBytes: LIMIT }), { timeout: "2 minutes" })((it) => {
    it.effect("a body over the limit is 413 with Connection: close, with or without Content-Length: nothing runs, nothing is stored", () =>
      Effect.gen(function*() {
        const account = freshAccount()
        const body = `{"amount":1,"pad":"${"x".repeat(LIMIT)}"}`
        for (const chunked of [false, true]) {
          const reply = yield* send(`/v1/accounts/${account}/transfers`, {
            body,
            chunked,
            key: `big-${chunked}`,
            user: "alice"
          })
          expect(reply.status).toBe(413)
          expect(reply.headers.connection).toBe("close")
          expect(json(reply)).toMatchObject({ code: "request-body-too-large", status: 413 })
          expect(yield* recordsOf("POST /v1/accounts/:account/transfers", `big-${chunked}`)).toBe(0)
        }
        // 20 MiB without Content-Length: past the 8 MiB the server discards, it answers and cuts the rest.
        const huge = yield* send(`/v1/accounts/${account}/transfers`, {
          body: "x".repeat(20 * 1024 * 1024),
          chunked: true,
          key: "huge",
          user: "alice"
        })
        expect(huge.status).toBe(413)
        expect(executions(account)).toBe(0)
        expect(yield* transfersOf(account)).toBe(0)
        // A body at the limit is read whole, and the key is free for the request that fits.
        const fits = yield* send(`/v1/accounts/${account}/transfers`, {
          body: `{"amount":1}`,
          key: "big-false",
          user: "alice"
        })
        expect(fits.status).toBe(201)
      }))

    it.effect("an oversized body with Content-Length always gets its 413: node:http, fetch and a slow client that sends it whole before reading, no EPIPE or reset", () =>
      Effect.gen(function*() {
        const p = yield* port
        const account = freshAccount()
        const path = `/v1/accounts/${account}/transfers`
        const outcomes: Array<Outcome & { readonly client: string; readonly size: number }> = []
        // 12 sizes from 1.5 to 5 MiB, each through node:http and fetch.
        for (let i = 0; i < 12; i++) {
          const size = Math.round(1.5 * MiB + (i * 3.5 * MiB) / 11)
          const body = Buffer.alloc(size, 120)
          outcomes.push({
            client: "node:http",
            size,
            ...yield* Effect.promise(() => viaNodeHttp(p, path, body, `cl-node-${i}`))
          })
          outcomes.push({
            client: "fetch",
            size,
            ...yield* Effect.promise(() => viaFetch(p, path, body, `cl-fetch-${i}`))
          })
        }
        for (const [i, size] of [1.5 * MiB, 2 * MiB].entries()) {
          outcomes.push({
            client: "slow",
            size,
            ...yield* Effect.promise(() => viaSlowWholeBodyClient(p, path, size, `cl-slow-${i}`))
          })
        }
        expect(outcomes.filter((outcome) => outcome.status !== 413 || outcome.error !== undefined)).toEqual([])
        expect(outcomes).toHaveLength(26)
        expect(executions(account)).toBe(0)
        expect(yield* recordsOf("POST /v1/accounts/:account/transfers", "cl-node-0")).toBe(0)
      }))

    it.effect("a declared length over the limit with Expect: 100-continue is answered 413 at once: the body is never asked for", () =>
      Effect.gen(function*() {
        const p = yield* port
        const account = freshAccount()
        const outcome = yield* Effect.promise(() =>
          new Promise<{ readonly status: number | undefined; readonly continued: boolean }>((resolve, reject) => {
            let continued = false
            const req = Http.request({
              host: "127.0.0.1",
              port: p,
              path: `/v1/accounts/${account}/transfers`,
              method: "POST",
              agent: false,
              headers: { ...headersFor("expect"), "content-length": String(4 * MiB), expect: "100-continue" }
            }, (res) => {
              res.resume()
              res.on("end", () => resolve({ status: res.statusCode, continued }))
            })
            req.on("continue", () => {
              continued = true
              req.end(Buffer.alloc(4 * MiB, 120))
            })
            req.on("error", reject)
            req.flushHeaders()
          })
        )
        expect(outcome).toEqual({ status: 413, continued: false })
        expect(executions(account)).toBe(0)
      }))

    it.effect("a JSON body nested 3,000 deep in a decoded field is 400 request-body-too-deep before the handler, never stored: the retry with a valid body runs once", () =>
      Effect.gen(function*() {
        const account = freshAccount()
        const path = `/v1/accounts/${account}/trees`
        const refused = yield* send(path, { body: treeBody(3000), key: "deep", user: "alice" })
        expect([refused.status, refused.text.length > 0, executions(account)]).toEqual([400, true, 0])
        expect(json(refused)).toMatchObject({ code: "request-body-too-deep", status: 400 })
        expect(refused.headers["content-type"]).toBe("application/problem+json")
        expect(executions(account)).toBe(0)
        expect(yield* recordsOf("POST /v1/accounts/:account/trees", "deep")).toBe(0)
        // The key is free: the corrected retry runs, once, and its answer replays.
        const valid = treeBody(2)
        const first = yield* send(path, { body: valid, key: "deep", user: "alice" })
        const replay = yield* send(path, { body: valid, key: "deep", user: "alice" })
        expect([first.status, first.text]).toEqual([201, "1"])
        expect([replay.status, replay.headers["idempotent-replayed"], replay.text]).toEqual([201, "true", "1"])
        expect(executions(account)).toBe(1)
        expect(yield* transfersOf(account)).toBe(1)
      }))

    it.effect("without a key the same body is the same 400, never a 500; nesting up to maxJsonDepth (64) decodes", () =>
      Effect.gen(function*() {
        const account = freshAccount()
        const path = `/v1/accounts/${account}/trees`
        for (const body of [treeBody(3000), treeBody(20_000)]) {
          const refused = yield* send(path, { body, user: "alice" })
          expect([refused.status, refused.text.length > 0]).toEqual([400, true])
          expect(json(refused)).toMatchObject({ code: "request-body-too-deep" })
        }
        // Through a plain route (Idempotency.wrapper), with a key: refused before its handler reads it.
        const plain = yield* send(`/plain/${account}`, { body: treeBody(3000), key: "deep-plain", user: "alice" })
        expect([plain.status, plain.text.length > 0]).toEqual([400, true])
        expect(json(plain)).toMatchObject({ code: "request-body-too-deep" })
        expect(executions(account)).toBe(0)
        // 64 levels (the default bound) pass, with or without a key; 65 do not. Strings do not count.
        const padded = (levels: number) =>
          `{"tree":{"children":[]},"pad":${"[".repeat(levels - 1)}"[[{{"${"]".repeat(levels - 1)}}`
        expect((yield* send(path, { body: padded(64), user: "alice" })).status).toBe(201)
        expect((yield* send(path, { body: padded(64), key: "at-the-bound", user: "alice" })).status).toBe(201)
        expect(json(yield* send(path, { body: padded(65), user: "alice" }))).toMatchObject({
          code: "request-body-too-deep"
        })
        expect(json(yield* send(path, { body: padded(65), key: "past-the-bound", user: "alice" }))).toMatchObject({
          code: "request-body-too-deep"
        })
        expect(executions(account)).toBe(2)
      }))

    it.effect("a response over the store limit is rolled back and answered 500; the retry runs again", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const account = freshAccount()
        for (let i = 0; i < 2; i++) {
          const reply = yield* send(`/v1/accounts/${account}/large`, { key: "large", user: "alice" })
          expect(reply.status).toBe(500)
          expect(json(reply)).toMatchObject({ code: "response-not-storable" })
        }
        expect(executions(account)).toBe(2)
        expect(yield* transfersOf(account)).toBe(0)
        const [records] = yield* sql<
          { n: number }
        >`SELECT count(*)::int AS n FROM durable.mutation_records WHERE key = 'large'`
        expect(records!.n).toBe(0)
      }))
  })
})
