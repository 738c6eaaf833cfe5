// Every rule of the middleware against a real server on 127.0.0.1 and a real PostgreSQL.
// Each test uses accounts of its own; "runs" counts handler invocations (rolled back or not),
// the transfers table the effects that stayed.
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as Net from "node:net"
import {
  executions,
  freshAccount,
  json,
  port,
  recordsOf,
  type Reply,
  send,
  server,
  TRANSFER_TOPIC,
  transfersOf
} from "./support.js"

const TRANSFER = "POST /v1/accounts/:account/transfers"

const expectProblem = (reply: Reply, status: number, code: string) => {
  expect(reply.status).toBe(status)
  expect(reply.headers["content-type"]).toBe("application/problem+json")
  expect(json(reply)).toMatchObject({ status, code, type: `https://effect-durable.invalid/problems/${code}` })
  expect(reply.headers["idempotent-replayed"]).toBeUndefined()
}

const transfer = (account: number, body: string, key: string | undefined, user = "alice", query = "") =>
  send(`/v1/accounts/${account}/transfers${query}`, { body, ...(key === undefined ? {} : { key }), user })

/** Sends a raw request and returns the status line (for bytes no HTTP client will send). */
const rawStatusLine = (portNumber: number, head: string) =>
  Effect.promise(() =>
    new Promise<string>((resolve, reject) => {
      const socket = Net.connect(portNumber, "127.0.0.1", () => socket.write(head))
      let received = ""
      socket.on("data", (chunk) => (received += chunk.toString("latin1")))
      socket.on("end", () => resolve(received.split("\r\n")[0]!))
      socket.on("error", reject)
    })
  )

describe("Idempotency-Key on an HttpApi", () => {
  it.layer(server(), { timeout: "2 minutes" })((it) => {
    describe("the header", () => {
      it.effect("a required key that is missing is 400 problem+json: nothing runs, nothing is recorded", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const reply = yield* transfer(account, `{"amount":5}`, undefined)
          expectProblem(reply, 400, "idempotency-key-missing")
          expect(reply.headers["content-language"]).toBe("en")
          expect(executions(account)).toBe(0)
          expect(yield* transfersOf(account)).toBe(0)
        }))

      it.effect("on an optional endpoint a request without a key runs every time, without the ledger", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const first = yield* send(`/v1/accounts/${account}/deposits`, { body: `{"amount":5}`, user: "alice" })
          const second = yield* send(`/v1/accounts/${account}/deposits`, { body: `{"amount":5}`, user: "alice" })
          expect([first.status, second.status]).toEqual([201, 201])
          expect(second.headers["idempotent-replayed"]).toBeUndefined()
          expect(executions(account)).toBe(2)
          const withKey = yield* send(`/v1/accounts/${account}/deposits`, {
            body: `{"amount":5}`,
            user: "alice",
            key: "d-1"
          })
          const replay = yield* send(`/v1/accounts/${account}/deposits`, {
            body: `{"amount":5}`,
            user: "alice",
            key: "d-1"
          })
          expect(replay.headers["idempotent-replayed"]).toBe("true")
          expect(replay.body.equals(withKey.body)).toBe(true)
          expect(executions(account)).toBe(3)
        }))

      it.effect("malformed keys are 400 before anything runs: empty, blank, too long, non-ASCII, control characters, bad escapes, parameters, lists", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const refused = [
            `""`,
            `" "`,
            `"${"k".repeat(256)}"`,
            "k".repeat(256),
            `"ké"`,
            Buffer.from("\"k\u00e9\"", "utf8").toString("latin1"), // raw UTF-8 bytes
            "\"a\tb\"",
            `"a\\b"`,
            `"unterminated`,
            `"k";p=1`,
            `k;p=1`,
            `"a", "b"`,
            `a b`
          ]
          for (const key of refused) {
            expectProblem(yield* transfer(account, `{"amount":5}`, key), 400, "idempotency-key-invalid")
          }
          // Two field lines: Node joins them into a list, which is not a key.
          expectProblem(
            yield* send(`/v1/accounts/${account}/transfers`, {
              body: `{"amount":5}`,
              user: "alice",
              headers: { "idempotency-key": [`"k"`, `"k"`] }
            }),
            400,
            "idempotency-key-invalid"
          )
          expect(executions(account)).toBe(0)
          const [records] = yield* (yield* SqlClient.SqlClient)<{ n: number }>`
            SELECT count(*)::int AS n FROM durable.mutation_records WHERE subject = 'alice' AND operation = ${TRANSFER} AND key LIKE 'k%'`
          expect(records!.n).toBe(0)
        }))

      it.effect("a CR inside the field value never reaches the application", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const line = yield* rawStatusLine(
            yield* port,
            `POST /v1/accounts/${account}/transfers HTTP/1.1\r\nHost: x\r\nIdempotency-Key: "a\rb"\r\nContent-Length: 0\r\n\r\n`
          )
          expect(line).toMatch(/^HTTP\/1\.1 400/)
          expect(executions(account)).toBe(0)
        }))

      it.effect("key forms: 255 characters work, a bare token is the same key as its quoted form, escapes are read, the header name is case-insensitive", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const long = "k".repeat(255)
          expect((yield* transfer(account, `{"amount":1}`, `"${long}"`)).status).toBe(201)
          expect((yield* transfer(account, `{"amount":1}`, long)).headers["idempotent-replayed"]).toBe("true")
          expect((yield* transfer(account, `{"amount":2}`, `"a\\"b"`)).status).toBe(201)
          expect(yield* recordsOf(TRANSFER, `a"b`)).toBe(1)
          const mixedCase = yield* send(`/v1/accounts/${account}/transfers`, {
            body: `{"amount":2}`,
            user: "alice",
            headers: { "IDEMPOTENCY-KEY": `"a\\"b"` }
          })
          expect(mixedCase.headers["idempotent-replayed"]).toBe("true")
          expect(executions(account)).toBe(2)
        }))

      it.effect("GET, PUT and DELETE ignore the key: they run every time and are never replayed", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          for (const method of ["PUT", "PUT", "DELETE", "DELETE"]) {
            const reply = yield* send(`/v1/accounts/${account}`, {
              method,
              key: "ignored",
              user: "alice",
              ...(method === "PUT" ? { body: `{"amount":1}` } : {})
            })
            expect(reply.status).toBe(200)
            expect(reply.headers["idempotent-replayed"]).toBeUndefined()
          }
          expect(executions(account)).toBe(4)
          const get = yield* send(`/v1/accounts/${account}/transfers`, { method: "GET", key: "ignored", user: "alice" })
          expect(get.status).toBe(200)
          expect(get.headers["idempotent-replayed"]).toBeUndefined()
          // A plain route that takes any method goes through the ledger only for POST and PATCH.
          const other = freshAccount()
          for (const method of ["PUT", "PUT", "DELETE"]) {
            const reply = yield* send(`/plain/${other}`, { method, key: "ignored", user: "alice", body: "x" })
            expect(reply.status).toBe(200)
            expect(reply.headers["idempotent-replayed"]).toBeUndefined()
          }
          expect(executions(other)).toBe(3)
          expect(yield* recordsOf("PUT /plain/:account", "ignored")).toBe(0)
        }))
    })

    describe("identity and fingerprint", () => {
      it.effect("the same key on POST and PATCH of one path, or on another route, names other operations: each runs", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          expect((yield* transfer(account, `{"amount":1}`, "shared")).status).toBe(201)
          const patch = yield* send(`/v1/accounts/${account}/transfers`, {
            method: "PATCH",
            body: `{"amount":1}`,
            key: "shared",
            user: "alice"
          })
          expect(patch.status).toBe(200)
          const deposit = yield* send(`/v1/accounts/${account}/deposits`, {
            body: `{"amount":1}`,
            key: "shared",
            user: "alice"
          })
          expect(deposit.status).toBe(201)
          expect([patch, deposit].map((reply) => reply.headers["idempotent-replayed"])).toEqual([undefined, undefined])
          expect(executions(account)).toBe(3)
        }))

      it.effect("the same key with another path parameter or query string is 422 and runs nothing", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const other = freshAccount()
          const first = yield* transfer(account, `{"amount":1}`, "where", "alice", "?memo=a")
          expect(first.status).toBe(201)
          expectProblem(
            yield* transfer(other, `{"amount":1}`, "where", "alice", "?memo=a"),
            422,
            "idempotency-key-reused"
          )
          expectProblem(
            yield* transfer(account, `{"amount":1}`, "where", "alice", "?memo=b"),
            422,
            "idempotency-key-reused"
          )
          expectProblem(yield* transfer(account, `{"amount":1}`, "where", "alice"), 422, "idempotency-key-reused")
          expect([executions(account), executions(other)]).toEqual([1, 0])
        }))

      it.effect("subjects are apart: one key from two users runs twice and each replays only its own response", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const alice = yield* transfer(account, `{"amount":3}`, "mine")
          const bob = yield* transfer(account, `{"amount":3}`, "mine", "bob")
          expect(json(alice)).toMatchObject({ by: "alice" })
          expect(json(bob)).toMatchObject({ by: "bob" })
          expect((yield* transfer(account, `{"amount":3}`, "mine")).body.equals(alice.body)).toBe(true)
          expect((yield* transfer(account, `{"amount":3}`, "mine", "bob")).body.equals(bob.body)).toBe(true)
          expect(executions(account)).toBe(2)
        }))

      it.effect("a key sent without credentials, or with wrong ones, is 401: no replay, nothing recorded", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          yield* transfer(account, `{"amount":3}`, "private")
          // The API's own security wraps the middleware: it refuses them before any lookup.
          for (const headers of [{}, { authorization: "Bearer forged" }]) {
            const refused = yield* send(`/v1/accounts/${account}/transfers`, {
              body: `{"amount":3}`,
              key: "private",
              headers
            })
            expect([refused.status, refused.headers["idempotent-replayed"]]).toEqual([401, undefined])
          }
          // Where the subject comes from a middleware that never refuses (Subject.Identify), the
          // idempotency middleware refuses them itself.
          const other = freshAccount()
          const tip = (headers: Readonly<Record<string, string>>) =>
            send(`/v1/public/${other}/tips`, { body: `{"amount":3}`, key: "private", headers })
          expect(
            (yield* send(`/v1/public/${other}/tips`, { body: `{"amount":3}`, key: "private", user: "alice" })).status
          )
            .toBe(200)
          const anonymous = yield* tip({})
          expectProblem(anonymous, 401, "unauthenticated")
          const forged = yield* tip({ authorization: "Bearer forged" })
          expectProblem(forged, 401, "unauthenticated")
          expect([executions(account), executions(other)]).toEqual([1, 1])
          expect(yield* recordsOf(TRANSFER, "private")).toBe(1)
          expect(yield* recordsOf("POST /v1/public/:account/tips", "private")).toBe(1)
        }))

      it.effect("JSON matches by its canonical form: member order, whitespace and 100 vs 1e2 replay", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const first = yield* send(`/v1/accounts/${account}/deposits`, {
            body: `{"amount":100}`,
            key: "canon",
            user: "alice"
          })
          for (const body of [`{ "amount" : 100 }`, `{"amount":1e2}`, `{"amount":100.0}`, `\n{"amount":100}\n`]) {
            const again = yield* send(`/v1/accounts/${account}/deposits`, { body, key: "canon", user: "alice" })
            expect(again.headers["idempotent-replayed"]).toBe("true")
            expect(again.body.equals(first.body)).toBe(true)
          }
          // Member order: the transfer payload has one member, the plain route echoes any JSON.
          const plain = yield* send(`/plain/${account}`, { body: `{"a":1,"b":2}`, key: "order", user: "alice" })
          const reordered = yield* send(`/plain/${account}`, { body: `{"b":2,"a":1}`, key: "order", user: "alice" })
          expect(reordered.headers["idempotent-replayed"]).toBe("true")
          expect(reordered.body.equals(plain.body)).toBe(true)
          expect(executions(account)).toBe(2)
        }))

      it.effect("JSON that canonical form would change counts by its bytes: duplicate names, NFC vs NFD, integers past 2^53", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const cases: ReadonlyArray<readonly [string, string, string]> = [
            ["dup", `{"a":1,"a":2}`, `{"a":2}`],
            ["nfc", `{"name":"\u00e9"}`, `{"name":"e\u0301"}`],
            ["big", `{"id":9007199254740993}`, `{"id":9007199254740992}`],
            ["digits", `{"x":0.10000000000000001}`, `{"x":0.1}`]
          ]
          for (const [key, body, other] of cases) {
            expect((yield* send(`/plain/${account}`, { body, key, user: "alice" })).status).toBe(200)
            expectProblem(
              yield* send(`/plain/${account}`, { body: other, key, user: "alice" }),
              422,
              "idempotency-key-reused"
            )
            // The very bytes replay.
            expect((yield* send(`/plain/${account}`, { body, key, user: "alice" })).headers["idempotent-replayed"])
              .toBe("true")
          }
          expect(executions(account)).toBe(4)
        }))

      it.effect("other bodies count by bytes and Content-Type; an empty body is empty whatever its Content-Type", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const note = (body: string, contentType: string) =>
            send(`/v1/accounts/${account}/notes`, {
              body,
              key: "note",
              user: "alice",
              headers: { "content-type": contentType }
            })
          expect((yield* note("hello", "text/plain")).status).toBe(200)
          expect((yield* note("hello", "text/plain; charset=UTF-8")).status).toBe(422)
          expect((yield* note("hello", "text/markdown")).status).toBe(422)
          expect((yield* note("hello ", "text/plain")).status).toBe(422)
          expect((yield* note("hello", "TEXT/PLAIN")).headers["idempotent-replayed"]).toBe("true")

          const plain = (body: string | undefined, contentType: string | undefined) =>
            send(`/plain/${account}`, {
              key: "empty",
              user: "alice",
              ...(body === undefined ? {} : { body }),
              headers: contentType === undefined ? {} : { "content-type": contentType }
            })
          expect((yield* plain("", "application/json")).status).toBe(200)
          expect((yield* plain(undefined, undefined)).headers["idempotent-replayed"]).toBe("true")
          expect((yield* plain("", "text/plain")).headers["idempotent-replayed"]).toBe("true")
          expect((yield* plain("{}", "application/json")).status).toBe(422)
          expect(executions(account)).toBe(2)
        }))

      it.effect("a mismatch leaves the record alone: the original request still replays", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const first = yield* transfer(account, `{"amount":7}`, "keep")
          expect((yield* transfer(account, `{"amount":8}`, "keep")).status).toBe(422)
          const again = yield* transfer(account, `{"amount":7}`, "keep")
          expect(again.headers["idempotent-replayed"]).toBe("true")
          expect(again.body.equals(first.body)).toBe(true)
          expect(yield* transfersOf(account)).toBe(1)
        }))
    })

    describe("the first request runs in the ledger's transaction", () => {
      it.effect("its row, its outbox message and the record commit together", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const account = freshAccount()
          const reply = yield* transfer(account, `{"amount":9}`, "atomic")
          const { id } = json(reply) as { id: number }
          const [row] = yield* sql<{ transfers: number; messages: number; records: number; same: boolean }>`
            SELECT (SELECT count(*)::int FROM transfers WHERE account = ${account}) AS transfers,
                   (SELECT count(*)::int FROM durable.outbox_messages WHERE topic = ${TRANSFER_TOPIC} AND payload->>'transfer' = ${
            String(id)
          }) AS messages,
                   (SELECT count(*)::int FROM durable.mutation_records WHERE key = 'atomic' AND operation = ${TRANSFER}) AS records,
                   (SELECT t.xmin = r.xmin FROM transfers t, durable.mutation_records r
                     WHERE t.id = ${id} AND r.key = 'atomic' AND r.operation = ${TRANSFER}) AS same`
          expect(row).toEqual({ transfers: 1, messages: 1, records: 1, same: true })
        }))

      it.effect("a defect after a write stores nothing and leaves no row; the retry runs again", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const first = yield* send(`/v1/accounts/${account}/boom`, { key: "boom", user: "alice" })
          expect(first.status).toBe(500)
          const second = yield* send(`/v1/accounts/${account}/boom`, { key: "boom", user: "alice" })
          expect(second.status).toBe(500)
          expect(second.headers["idempotent-replayed"]).toBeUndefined()
          expect(executions(account)).toBe(2)
          expect(yield* transfersOf(account)).toBe(0)
          expect(yield* recordsOf("POST /v1/accounts/:account/boom", "boom")).toBe(0)
        }))

      it.effect("a 5xx response after writes rolls back its row and its outbox message; the retry runs again", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const account = freshAccount()
          for (let i = 0; i < 2; i++) {
            const reply = yield* send(`/v1/accounts/${account}/unavailable`, { key: "later", user: "alice" })
            expect([reply.status, reply.text]).toEqual([503, "try later"])
          }
          expect(executions(account)).toBe(2)
          expect(yield* transfersOf(account)).toBe(0)
          const [messages] = yield* sql<{ n: number }>`
            SELECT count(*)::int AS n FROM durable.outbox_messages WHERE payload->>'unavailable' = ${String(account)}`
          expect(messages!.n).toBe(0)
        }))

      it.effect("a failing COMMIT (a deferred constraint) is a 500 problem, never the handler's 2xx; nothing is stored", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          for (let i = 0; i < 2; i++) {
            expectProblem(
              yield* send(`/v1/accounts/${account}/violations`, { key: "deferred", user: "alice" }),
              500,
              "database-error"
            )
          }
          expect(executions(account)).toBe(2)
          expect(yield* transfersOf(account)).toBe(0)
          expect(yield* recordsOf("POST /v1/accounts/:account/violations", "deferred")).toBe(0)
        }))

      it.effect("a streamed response is buffered, stored and replayed", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const first = yield* send(`/v1/accounts/${account}/streams`, { key: "stream", user: "alice" })
          const again = yield* send(`/v1/accounts/${account}/streams`, { key: "stream", user: "alice" })
          expect([first.status, first.text, first.headers["content-type"]]).toEqual([201, "abc", "text/plain"])
          expect([again.status, again.text, again.headers["content-type"], again.headers["idempotent-replayed"]])
            .toEqual([
              201,
              "abc",
              "text/plain",
              "true"
            ])
          expect(executions(account)).toBe(1)
        }))
    })

    describe("replays", () => {
      it.effect("a replay is the stored status, the allowlisted headers and the very bytes, marked; never Set-Cookie or per-request headers", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const first = yield* send(`/v1/accounts/${account}/headers`, { key: "exact", user: "alice" })
          expect(first.status).toBe(201)
          expect(first.headers["set-cookie"]).toBeDefined()
          expect(first.headers["x-request-id"]).toBeDefined()
          expect(first.headers["idempotent-replayed"]).toBeUndefined()
          const again = yield* send(`/v1/accounts/${account}/headers`, { key: "exact", user: "alice" })
          expect(again.status).toBe(201)
          expect(again.headers["idempotent-replayed"]).toBe("true")
          expect(again.body.equals(first.body)).toBe(true)
          expect(again.text).toMatch(/^\{"z":1,"a":2,"id":\d+\}$/)
          for (const name of ["content-type", "location", "etag", "content-length"]) {
            expect(again.headers[name]).toBe(first.headers[name])
          }
          expect(again.headers["set-cookie"]).toBeUndefined()
          expect(again.headers["x-request-id"]).toBeUndefined()
          expect(again.headers.date).toBeDefined()
          expect(executions(account)).toBe(1)
        }))

      it.effect("typed 4xx after execution began are stored and replayed: 402 after a write, and 404", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const rejected = yield* transfer(account, `{"amount":5000}`, "broke")
          expect([rejected.status, json(rejected)]).toEqual([402, { balance: 1000, _tag: "InsufficientFunds" }])
          const again = yield* transfer(account, `{"amount":5000}`, "broke")
          expect([again.status, again.headers["idempotent-replayed"]]).toEqual([402, "true"])
          expect(again.body.equals(rejected.body)).toBe(true)
          // The rejection's write committed with it, once.
          expect(yield* transfersOf(account)).toBe(1)
          const missing = yield* transfer(account, `{"amount":404}`, "missing")
          const missingAgain = yield* transfer(account, `{"amount":404}`, "missing")
          expect([missing.status, missing.body.length, missing.headers["content-type"]]).toEqual([404, 0, undefined])
          expect([missingAgain.status, missingAgain.body.length, missingAgain.headers["content-type"]]).toEqual([
            404,
            0,
            undefined
          ])
          expect(missingAgain.headers["idempotent-replayed"]).toBe("true")
          expect(executions(account)).toBe(2)
        }))

      it.effect("a typed error with a key is the very response HttpApi gives it without one, and replays", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const deposit = (key?: string) =>
            send(`/v1/accounts/${account}/deposits`, {
              body: `{"amount":5000}`,
              user: "alice",
              ...(key === undefined ? {} : { key })
            })
          const plain = yield* deposit()
          expect([plain.status, json(plain)]).toEqual([402, { balance: 1000, _tag: "InsufficientFunds" }])
          const first = yield* deposit("rich")
          const again = yield* deposit("rich")
          for (const reply of [first, again]) {
            expect(reply.status).toBe(402)
            expect(reply.body.equals(plain.body)).toBe(true)
            expect(reply.headers["content-type"]).toBe(plain.headers["content-type"])
          }
          expect([first.headers["idempotent-replayed"], again.headers["idempotent-replayed"]]).toEqual([
            undefined,
            "true"
          ])
          expect(executions(account)).toBe(2)
          // The rejections' writes committed with them; the replay wrote nothing.
          expect(yield* transfersOf(account)).toBe(2)
        }))

      it.effect("text, bytes and form bodies reach the handler and replay byte-identical", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const bytes = Buffer.from([0, 1, 2, 250])
          const post = (path: string, body: string | Buffer, contentType: string) =>
            send(`/v1/accounts/${account}/${path}`, {
              body,
              key: path,
              user: "alice",
              headers: { "content-type": contentType }
            })
          for (
            const [path, body, contentType, expected] of [
              ["notes", "hi", "text/plain", "noted 2 characters"],
              ["bytes", bytes, "application/octet-stream", Buffer.from([0, 1, 2, 250, 255]).toString("latin1")],
              ["forms", "text=a+b", "application/x-www-form-urlencoded", `"form a b"`]
            ] as const
          ) {
            const first = yield* post(path, body, contentType)
            expect(first.body.toString(path === "bytes" ? "latin1" : "utf8")).toBe(expected)
            const again = yield* post(path, body, contentType)
            expect(again.headers["idempotent-replayed"]).toBe("true")
            expect(again.body.equals(first.body)).toBe(true)
            expect(again.headers["content-type"]).toBe(first.headers["content-type"])
          }
          expect(executions(account)).toBe(3)
        }))
    })

    describe("refusals before the handler are never stored", () => {
      it.effect("a payload that does not decode is 400 and not stored: the corrected retry with the same key runs", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const bad = yield* transfer(account, `{"amount":"five"}`, "fix-me")
          expect(bad.status).toBe(400)
          // HttpApi's own refusal (rendered by ProblemDetails, which wraps the middleware).
          expect(json(bad)).toMatchObject({
            status: 400,
            title: "Bad Request",
            errors: [{ path: ["payload", "amount"] }]
          })
          expect(yield* recordsOf(TRANSFER, "fix-me")).toBe(0)
          const fixed = yield* transfer(account, `{"amount":5}`, "fix-me")
          expect([fixed.status, fixed.headers["idempotent-replayed"]]).toEqual([201, undefined])
          const invalidJson = yield* transfer(account, `{"amount":`, "broken-json")
          expect(invalidJson.status).toBe(400)
          expect((yield* transfer(account, `{"amount":6}`, "broken-json")).status).toBe(201)
          expect(executions(account)).toBe(2)
        }))

      it.effect("a Content-Type the endpoint does not decode is 415 and not stored: the corrected retry with the same key runs", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const wrong = yield* send(`/v1/accounts/${account}/transfers`, {
            body: `{"amount":5}`,
            key: "typed",
            user: "alice",
            headers: { "content-type": "text/plain" }
          })
          expect(wrong.status).toBe(415)
          expect(yield* recordsOf(TRANSFER, "typed")).toBe(0)
          const fixed = yield* transfer(account, `{"amount":5}`, "typed")
          expect([fixed.status, fixed.headers["idempotent-replayed"]]).toEqual([201, undefined])
          expect(executions(account)).toBe(1)
        }))

      it.effect("the API's own security refusing the request (a revoked token) is 401 and not stored", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const refused = yield* transfer(account, `{"amount":5}`, "revoked-key", "revoked")
          expect(refused.status).toBe(401)
          expect(yield* recordsOf(TRANSFER, "revoked-key")).toBe(0)
          expect(executions(account)).toBe(0)
        }))

      it.effect("a multipart body on an idempotent endpoint is 415", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const reply = yield* send(`/v1/accounts/${account}/notes`, {
            body: "--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--x--\r\n",
            key: "multi",
            user: "alice",
            headers: { "content-type": "multipart/form-data; boundary=x" }
          })
          expectProblem(reply, 415, "request-body-unsupported")
          expect(executions(account)).toBe(0)
        }))

      it.effect("an endpoint without the Idempotency middleware commits but stores nothing: every retry runs", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          for (let i = 0; i < 2; i++) {
            const reply = yield* send(`/v1/accounts/${account}/unmarked`, { key: "unmarked", user: "alice" })
            expect([reply.status, reply.headers["idempotent-replayed"]]).toEqual([201, undefined])
          }
          expect(executions(account)).toBe(2)
          expect(yield* recordsOf("POST /v1/accounts/:account/unmarked", "unmarked")).toBe(0)
        }))

      it.effect("an endpoint marked notIdempotent refuses a request with a key (400, nothing runs) and runs one without", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const keyed = yield* send(`/v1/accounts/${account}/touches`, { method: "PATCH", key: "k", user: "alice" })
          expectProblem(keyed, 400, "idempotency-key-unsupported")
          expect(json(keyed)).toMatchObject({
            detail: expect.stringContaining("a retry with the same Idempotency-Key would run it again")
          })
          expect(executions(account)).toBe(0)
          const plain = yield* send(`/v1/accounts/${account}/touches`, { method: "PATCH", user: "alice" })
          expect([plain.status, plain.text]).toEqual([200, "1"])
          expect(yield* recordsOf("PATCH /v1/accounts/:account/touches", "k")).toBe(0)
        }))

      it.effect("a plain route wrapped notIdempotent refuses a request with a key (400, nothing runs) and runs one without", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const keyed = yield* send(`/plain-touch/${account}`, { method: "PATCH", key: "k", user: "alice", body: "x" })
          expectProblem(keyed, 400, "idempotency-key-unsupported")
          expect(executions(account)).toBe(0)
          const plain = yield* send(`/plain-touch/${account}`, { method: "PATCH", user: "alice", body: "x" })
          expect([plain.status, plain.text]).toEqual([200, "PATCH x"])
          expect(executions(account)).toBe(1)
        }))

      it.effect("routes that are not idempotent pass through untouched: health, the OpenAPI document", () =>
        Effect.gen(function*() {
          const health = yield* send("/v1/health", { method: "GET", key: "ignored" })
          expect([health.status, health.text]).toEqual([200, `"ok"`])
          const spec = yield* send("/openapi.json", { method: "GET" })
          const operation = (json(spec) as any).paths["/v1/accounts/{account}/transfers"].post
          expect(operation.parameters).toContainEqual(
            expect.objectContaining({ name: "Idempotency-Key", in: "header", required: true })
          )
          expect(Object.keys(operation.responses)).toEqual(
            expect.arrayContaining(["201", "400", "402", "409", "413", "415", "422"])
          )
          expect(operation.responses["409"].content["application/problem+json"]).toBeDefined()
        }))
    })

    describe("plain route handlers (Idempotency.wrapper)", () => {
      it.effect("first, replay, 422; a 4xx value is stored; a failure rolls back and runs again", () =>
        Effect.gen(function*() {
          const account = freshAccount()
          const plain = (body: string, key: string) =>
            send(`/plain/${account}`, { body, key, user: "alice", headers: { "content-type": "text/plain" } })
          const first = yield* plain("one", "p1")
          expect([first.status, first.text]).toEqual([200, "POST one"])
          expect((yield* plain("one", "p1")).headers["idempotent-replayed"]).toBe("true")
          expect((yield* plain("two", "p1")).status).toBe(422)
          const rejected = yield* plain("reject", "p2")
          expect(rejected.status).toBe(409)
          expect((yield* plain("reject", "p2")).headers["idempotent-replayed"]).toBe("true")
          expect((yield* plain("fail", "p3")).status).toBe(500)
          expect((yield* plain("fail", "p3")).status).toBe(500)
          expect(executions(account)).toBe(4)
          expect(yield* transfersOf(account)).toBe(2)
          expectProblem(yield* send(`/plain/${account}`, { body: "x", user: "alice" }), 400, "idempotency-key-missing")
        }))
    })
  })
})
