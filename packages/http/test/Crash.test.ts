// Failures around the transaction. A server killed after COMMIT, before it wrote the
// response: the client's retry, on another server, gets the stored response (the effect
// happened once). A client that goes away during the handler: the handler is interrupted,
// the transaction rolls back, nothing is stored, the retry runs once.
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { describe, expect, layer } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import { spawn } from "node:child_process"
import * as Http from "node:http"
import { fileURLToPath } from "node:url"
import { executions, freshAccount, gate, json, port, recordsOf, request, send, server, transfersOf } from "./support.js"

const crashServer = fileURLToPath(new URL("./fixtures/crash-server.ts", import.meta.url))
const TRANSFER = "POST /v1/accounts/:account/transfers"

/** Starts the crash server on the suite's database; resolves its port and a way to wait for lines. */
const startCrashServer = (databaseUrl: string) =>
  Effect.promise(() =>
    new Promise<{ port: number; output: () => string; exited: Promise<NodeJS.Signals | null>; kill: () => void }>(
      (resolve, reject) => {
        const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", crashServer], {
          env: { ...process.env, HTTP_CRASH_DATABASE_URL: databaseUrl },
          stdio: ["ignore", "pipe", "pipe"]
        })
        let stdout = ""
        let stderr = ""
        const exited = new Promise<NodeJS.Signals | null>((done) => child.once("exit", (_, signal) => done(signal)))
        child.stderr.on("data", (chunk) => (stderr += chunk))
        child.stdout.on("data", (chunk) => {
          stdout += chunk
          const found = /PORT=(\d+)/.exec(stdout)
          if (found !== null) {
            resolve({
              port: Number(found[1]),
              output: () => stdout,
              exited,
              kill: () => child.kill("SIGKILL")
            })
          }
        })
        void exited.then(() => reject(new Error(`crash server exited early: ${stderr}`)))
      }
    )
  )

describe("failures around the transaction", () => {
  layer(server(), { timeout: "2 minutes" })((it) => {
    it.effect("a server killed after COMMIT, before the response is written: the retry on another server replays it", () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase.TestDatabase
        const doomed = yield* startCrashServer(Redacted.value(db.url))
        const account = freshAccount()
        const path = `/v1/accounts/${account}/transfers`
        const call = { body: `{"amount":42}`, key: "lost-response", user: "alice" }
        const lost = request(doomed.port, path, { ...call, headers: { "x-crash": "after-commit" } }).then(
          (reply) => `answered ${reply.status}`,
          (error: Error) => `failed: ${error.message}`
        )
        yield* eventually(Effect.sync(doomed.output), (out) => out.includes("COMMITTED 201"))
        doomed.kill()
        expect(yield* Effect.promise(() => doomed.exited)).toBe("SIGKILL")
        // The client never got its response.
        expect(yield* Effect.promise(() => lost)).toMatch(/^failed/)
        expect(yield* transfersOf(account)).toBe(1)

        const retry = yield* send(path, call)
        expect([retry.status, retry.headers["idempotent-replayed"]]).toEqual([201, "true"])
        expect(json(retry)).toMatchObject({ account, amount: 42, by: "alice" })
        // Nothing ran in this process: the effect happened once, in the killed one.
        expect(executions(account)).toBe(0)
        expect(yield* transfersOf(account)).toBe(1)
        expect(yield* recordsOf(TRANSFER, "lost-response")).toBe(1)
      }))

    it.effect("a client that disconnects during the handler leaves no row and no record: its retry runs once", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const account = freshAccount()
        const held = yield* gate(account)
        const path = `/v1/accounts/${account}/transfers`
        const serverPort = yield* port
        const body = `{"amount":7}`
        // Sent by hand so that the socket can be destroyed mid-request.
        const outgoing = Http.request({
          host: "127.0.0.1",
          port: serverPort,
          path,
          method: "POST",
          agent: false,
          headers: {
            "content-type": "application/json",
            "content-length": String(body.length),
            "idempotency-key": "gone",
            authorization: "Bearer user-alice"
          }
        })
        outgoing.on("error", () => {})
        outgoing.end(body)
        // The handler wrote its row and waits at the gate, inside the transaction.
        yield* eventually(Effect.sync(() => executions(account)), (n) => n === 1)
        outgoing.destroy()
        // The server interrupts the handler: its transaction ends, the advisory lock with it.
        yield* eventually(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted
                              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
          (rows) => rows[0]!.n === 0
        )
        yield* Deferred.succeed(held, undefined)
        expect(yield* transfersOf(account)).toBe(0)
        expect(yield* recordsOf(TRANSFER, "gone")).toBe(0)
        const retry = yield* send(path, { body, key: "gone", user: "alice" })
        expect([retry.status, retry.headers["idempotent-replayed"]]).toEqual([201, undefined])
        expect(executions(account)).toBe(2)
        expect(yield* transfersOf(account)).toBe(1)
      }))
  })
})
