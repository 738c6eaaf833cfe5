// The admin page tried as an attacker would, over HTTP (no browser needed): credentials read
// whole and long enough, a page that answers only at its own paths, no cross-site reads, action
// bodies bounded, bulk actions held to the count confirmed, audit lines that cannot be forged,
// bad input a 4xx and a database that does not answer a 503, on every view.
import * as Durable from "@effect-durable/pg/Durable"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as OutboxBulk from "@effect-durable/pg/OutboxBulk"
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Redacted from "effect/Redacted"
import * as References from "effect/References"
import * as SqlClient from "effect/sql/SqlClient"
import * as Stream from "effect/Stream"
import { createServer, request as httpRequest } from "node:http"
import * as AdminPage from "../src/AdminPage.js"
import { deadLetters, enqueue, freshTopic, portOf, rowsOf, Substrate } from "./support.js"

const USER = "ops"
const PASSWORD = "a-password-of-the-suite"
const TOKEN = "tok-0123456789abcdef"
const auth = { basic: { user: USER, password: Redacted.make(PASSWORD) }, bearer: Redacted.make(TOKEN) }
const BASIC = `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString("base64")}`
const BEARER = `Bearer ${TOKEN}`

interface Logged {
  readonly message: string
  readonly annotations: Readonly<Record<string, unknown>>
}
const logged: Array<Logged> = []

const Server = HttpRouter.serve(Layer.mergeAll(
  HttpRouter.add("GET", "/", HttpServerResponse.text("the application")),
  AdminPage.layer({ mount: "/ops/durable", auth, batchSize: 2, statementTimeout: "1 second" }),
  AdminPage.layer({ mount: "/ro/durable", auth, readOnly: true }),
  AdminPage.layer({ mount: "/shown", showPayloads: true }),
  // A page whose database does not answer (nothing listens on port 1).
  AdminPage.layer({ mount: "/down" }).pipe(
    Layer.provide(Durable.layer({
      connection: { url: Redacted.make("postgres://nobody:nothing@127.0.0.1:1/none"), connectTimeout: "2 seconds" },
      checkSchemaVersion: false
    })),
    Layer.provide(TestDatabase.liveClock)
  )
)).pipe(
  Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" })),
  Layer.provide(Logger.layer([
    Logger.make(({ fiber, message }) =>
      void logged.push({
        message: (Array.isArray(message) ? message : [message]).map(String).join(" "),
        annotations: fiber.getRef(References.CurrentLogAnnotations)
      })
    )
  ]))
)

const Live = Server.pipe(Layer.provideMerge(Substrate))

interface Answer {
  readonly status: number
  readonly body: string
  readonly headers: Record<string, string | Array<string> | undefined>
}

/** A request exactly as given: the path unnormalized, any header, any body. */
const send = (path: string, init: { method?: string; headers?: Record<string, string>; body?: string } = {}) =>
  Effect.flatMap(HttpServer.HttpServer, (server) =>
    Effect.promise(() =>
      new Promise<Answer>((resolve, reject) => {
        const req = httpRequest(
          { host: "127.0.0.1", port: portOf(server), path, method: init.method ?? "GET", headers: init.headers ?? {} },
          (res) => {
            let body = ""
            res.setEncoding("utf8").on("data", (chunk) => (body += chunk)).on(
              "end",
              () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers })
            )
          }
        )
        req.on("error", reject)
        req.end(init.body)
      })
    ))

const signedIn = (path: string, init: { method?: string; headers?: Record<string, string>; body?: string } = {}) =>
  send(path, { ...init, headers: { authorization: BASIC, ...init.headers } })

/** A same-origin JSON POST of the page's script. */
const action = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  signedIn(path, {
    method: "POST",
    headers: { "content-type": "application/json", "sec-fetch-site": "same-origin", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body)
  })

const countOf = (query: string) =>
  Effect.map(
    signedIn(`/ops/durable/api/count?${query}`),
    (a) => JSON.parse(a.body) as { count: number; maxId: string | null }
  )

describe("admin page, tried as an attacker would", () => {
  it.layer(Live, { timeout: "180 seconds" })((it) => {
    it.effect("text after a valid credential is no credential: `Bearer TOKEN junk` and `Basic ... junk` are 401", () =>
      Effect.gen(function*() {
        const status = (authorization: string) =>
          Effect.map(send("/ops/durable/api/stats", { headers: { authorization } }), (a) => a.status)
        expect(yield* status(BEARER)).toBe(200)
        expect(yield* status(BASIC)).toBe(200)
        expect(yield* status(`${BEARER} junk`)).toBe(401)
        expect(yield* status(`${BASIC} junk`)).toBe(401)
        expect(yield* status(`${BASIC}junk`)).toBe(401)
        expect(yield* status(`Bearer ${TOKEN},other`)).toBe(401)
        expect(yield* status("Bearer")).toBe(401)
        expect(yield* status("Bearer ")).toBe(401)
      }))

    it.effect("an empty, blank or short password or token is refused when the page is made, naming the option, never the value", () =>
      Effect.gen(function*() {
        const refused = (options: AdminPage.Options) => Effect.flip(Effect.scoped(AdminPage.make(options)))
        const cases: ReadonlyArray<readonly [AdminPage.Auth, string]> = [
          [{ bearer: Redacted.make("") }, "auth.bearer"],
          [{ bearer: Redacted.make("short-token") }, "auth.bearer"],
          [{ bearer: Redacted.make("a token with spaces in it") }, "auth.bearer"],
          [{ basic: { user: "ops", password: Redacted.make("                ") } }, "auth.basic.password"],
          [{ basic: { user: "ops", password: Redacted.make("hunter2") } }, "auth.basic.password"],
          [{ basic: { user: "", password: Redacted.make(PASSWORD) } }, "auth.basic.user"],
          [{ basic: { user: "o:ps", password: Redacted.make(PASSWORD) } }, "auth.basic.user"]
        ]
        for (const [given, field] of cases) {
          const error = yield* refused({ auth: given })
          expect(error).toMatchObject({ _tag: "DurableConfigError", field })
          expect(error.message).not.toContain("short-token")
          expect(error.message).not.toContain("hunter2")
        }
        // Long enough: made.
        yield* Effect.scoped(AdminPage.make({ auth }))
      }))

    it.effect("the page answers only at its own paths as mounted: /ops/durableX, /OPS/DURABLE/, //ops/durable/ and the like are 404", () =>
      Effect.gen(function*() {
        expect((yield* signedIn("/ops/durable")).status).toBe(200)
        expect((yield* signedIn("/ops/durable/")).status).toBe(200)
        expect((yield* signedIn("/ops/durable/messages")).status).toBe(200)
        for (
          const path of [
            "/ops/durableX",
            "/ops/durableX/messages",
            "/OPS/DURABLE/",
            "/Ops/Durable/messages",
            "/ops/durable/MESSAGES",
            "//ops/durable/",
            "//ops/durable/messages",
            "/ops//durable/",
            "/ops/durable//messages",
            "/ops/durable/messages/",
            "/ops/durable;x",
            "/ops/durable/assets/APP.JS"
          ]
        ) {
          const answer = yield* signedIn(path)
          expect(answer.status, path).toBe(404)
          expect(answer.body, path).not.toContain("effect-durable</title>")
        }
        const write = yield* action("/OPS/DURABLE/actions/pause", { topic: freshTopic("case") })
        expect(write.status).toBe(404)
        expect((yield* send("/")).body).toBe("the application")
      }))

    it.effect("a basePath that starts with // (a link to another site) or is no path prefix is refused when the page is made", () =>
      Effect.gen(function*() {
        for (
          const basePath of [
            "//evil.example",
            "//evil.example/durable",
            "/a//b",
            "/a/",
            "/a/../b",
            "admin",
            "/a b",
            "/a?x"
          ]
        ) {
          const error = yield* Effect.flip(Effect.scoped(AdminPage.make({ basePath })))
          expect(error, basePath).toMatchObject({ _tag: "DurableConfigError", field: "basePath" })
        }
        yield* Effect.scoped(AdminPage.make({ basePath: "/proxy/durable" }))
        yield* Effect.scoped(AdminPage.make({ basePath: "" }))
      }))

    it.effect("another site's <img>, <script> or fetch cannot make the page read (403); following a link to it can", () =>
      Effect.gen(function*() {
        const read = (path: string, headers: Record<string, string>) =>
          Effect.map(signedIn(path, { headers }), (a) => a.status)
        const image = { "sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors", "sec-fetch-dest": "image" }
        const fetched = { "sec-fetch-site": "same-site", "sec-fetch-mode": "cors", "sec-fetch-dest": "empty" }
        const framed = { "sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate", "sec-fetch-dest": "iframe" }
        const link = { "sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate", "sec-fetch-dest": "document" }
        for (
          const path of [
            "/ops/durable/messages?topic=orders",
            "/ops/durable/schema",
            "/ops/durable/api/count",
            "/ops/durable/metrics",
            "/ops/durable/"
          ]
        ) {
          expect(yield* read(path, image), path).toBe(403)
          expect(yield* read(path, fetched), path).toBe(403)
          expect(yield* read(path, framed), path).toBe(403)
        }
        expect(yield* read("/ops/durable/messages?topic=orders", link)).toBe(200)
        expect(
          yield* read("/ops/durable/messages?topic=orders", {
            "sec-fetch-site": "same-origin",
            "sec-fetch-mode": "cors"
          })
        ).toBe(200)
        expect(
          yield* read("/ops/durable/messages?topic=orders", { "sec-fetch-site": "none", "sec-fetch-mode": "navigate" })
        ).toBe(200)
        // Probes are not reads of the page.
        expect(yield* read("/ops/durable/health/ready", image)).toBe(200)
      }))

    it.effect("GET /schema?drift=1&checks=1 runs neither; drift and the checks are actions (POST), refused on a read-only page and cross-site", () =>
      Effect.gen(function*() {
        const view = yield* signedIn("/ops/durable/schema?drift=1&checks=1")
        expect(view.status).toBe(200)
        expect(view.body).toContain("id=\"schema-version\"")
        expect(view.body).not.toContain("id=\"drift\"")
        expect(view.body).not.toContain("id=\"checks\"")
        expect(view.body).toContain("data-action=\"drift\"")
        const readOnly = yield* signedIn("/ro/durable/schema?drift=1")
        expect(readOnly.body).not.toContain("id=\"drift\"")
        expect(readOnly.body).not.toContain("data-action=\"drift\"")
        expect((yield* action("/ro/durable/schema/drift", {})).status).toBe(403)
        expect((yield* action("/ro/durable/schema/checks", {})).status).toBe(403)
        expect((yield* action("/ops/durable/schema/drift", {}, { "sec-fetch-site": "cross-site" })).status).toBe(403)
        expect(
          (yield* signedIn("/ops/durable/schema/drift", {
            method: "POST",
            headers: { "content-type": "text/plain" },
            body: "{}"
          })).status
        )
          .toBe(415)
        const drift = yield* action("/ops/durable/schema/drift", {})
        expect(drift.status).toBe(200)
        expect(JSON.parse(drift.body).html).toContain("No drift")
        const checks = yield* action("/ops/durable/schema/checks", {})
        expect(checks.status).toBe(200)
        expect(JSON.parse(checks.body).html).toContain("LISTEN/NOTIFY")
      }))

    it.effect("an action's body nested 5,000 deep is a 400, one over 64 KiB a 413, one that is not JSON a 400, and nothing changes", () =>
      Effect.gen(function*() {
        const topic = freshTopic("bodies")
        const deep = yield* action("/ops/durable/actions/pause", "[".repeat(5000) + "]".repeat(5000))
        expect(deep.status).toBe(400)
        expect(JSON.parse(deep.body).error).toContain("nested at most 4 levels")
        const deepObject = yield* action(
          "/ops/durable/actions/discard",
          `{"ids":${"[".repeat(3000)}${"]".repeat(3000)}}`
        )
        expect(deepObject.status).toBe(400)
        const large = yield* action("/ops/durable/actions/pause", { topic, pad: "x".repeat(200 * 1024) })
        expect(large.status).toBe(413)
        expect(JSON.parse(large.body).error).toContain("at most 64 KiB")
        const chunked = yield* signedIn("/ops/durable/actions/pause", {
          method: "POST",
          headers: { "content-type": "application/json", "transfer-encoding": "chunked" },
          body: JSON.stringify({ topic, pad: "x".repeat(200 * 1024) })
        })
        expect(chunked.status).toBe(413)
        const notJson = yield* action("/ops/durable/actions/pause", "{\"topic\":")
        expect(notJson.status).toBe(400)
        expect((yield* action("/ops/durable/actions/pause", { topic: 42 })).status).toBe(400)
        const paused = yield* Effect.flatMap(OutboxAdmin.OutboxAdmin, (admin) => admin.paused)
        expect(paused.some((p) => p.topic === topic)).toBe(false)
        // Under the bound, the same action works.
        expect((yield* action("/ops/durable/actions/pause", { topic })).status).toBe(200)
        expect(logged.filter((l) => l.message.includes("request failed") || l.message.includes(" failed: "))).toEqual(
          []
        )
      }))

    it.effect("a bulk action is held to the count confirmed: when the set moved it is a 409 and nothing changes", () =>
      Effect.gen(function*() {
        const topic = freshTopic("held")
        const ids = yield* enqueue(topic, 4)
        // The three newest die; the operator counts them.
        yield* TestSubstrate.settleByHand("dead", `id = ANY('{${ids.slice(1).join(",")}}'::bigint[])`, {
          last_error: "'boom'"
        })
        const counted = yield* countOf(`topic=${topic}`)
        expect(counted).toEqual({ count: 3, maxId: ids[3] })
        // Then an older one dies: same newest id, one more below it.
        yield* TestSubstrate.settleByHand("dead", `id = ${ids[0]!}`, { last_error: "'boom'" })
        const moved = yield* action("/ops/durable/actions/discard", {
          filter: `topic=${topic}`,
          upTo: counted.maxId,
          expected: counted.count
        })
        expect(moved.status).toBe(409)
        expect(JSON.parse(moved.body)).toMatchObject({ count: 4, maxId: ids[3] })
        expect(JSON.parse(moved.body).error).toContain("4 now, 3 confirmed")
        // A count that was never made is no confirmation either.
        expect((yield* action("/ops/durable/actions/discard", { filter: `topic=${topic}`, expected: 1 })).status).toBe(
          409
        )
        expect((yield* action("/ops/durable/actions/discard", { filter: `topic=${topic}` })).status).toBe(400)
        expect((yield* rowsOf(topic)).filter((r) => r.dead)).toHaveLength(4)
        // Counted again and confirmed: all four, no more.
        const again = yield* countOf(`topic=${topic}`)
        const started = yield* action("/ops/durable/actions/discard", {
          filter: `topic=${topic}`,
          upTo: again.maxId,
          expected: again.count
        })
        expect(started.status).toBe(200)
        const { job } = JSON.parse(started.body) as { job: string }
        const done = yield* eventually(
          Effect.map(
            signedIn(`/ops/durable/api/jobs/${job}`),
            (a) => JSON.parse(a.body) as { state: string; done: number; total: number }
          ),
          (j) => j.state !== "running"
        )
        expect(done).toMatchObject({ state: "done", done: 4, total: 4 })
        expect(yield* rowsOf(topic)).toEqual([])
        expect(logged.map((l) => l.message)).toContainEqual(
          expect.stringMatching(/^effect-durable admin: discard of all matching \(4 dead messages\) by ops from /)
        )
      }))

    it.effect("a bulk job stops at the count confirmed even when more match by the time it runs, oldest first, none twice", () =>
      Effect.gen(function*() {
        const topic = freshTopic("cap")
        const ids = yield* deadLetters(topic, 5)
        // Confirmed: 3 messages up to ids[3]; by the time the job runs, 4 match below it.
        const progress = yield* Effect.flatMap(
          OutboxBulk.OutboxBulk,
          (bulk) => Stream.runCollect(bulk.redriveMatching({ topic }, { upTo: ids[3]!, limit: 3, batchSize: 2 }))
        ).pipe(
          Effect.provide(OutboxBulk.layer)
        )
        expect(progress.map((p) => p.total)).toEqual([2, 3])
        expect(progress.map((p) => [...p.ids].sort())).toEqual([[ids[0], ids[1]].sort(), [ids[2]]])
        // The newest (past upTo) and the one past the count are still dead.
        expect((yield* rowsOf(topic)).map((r) => [r.id, r.dead])).toEqual([
          [ids[0], false],
          [ids[1], false],
          [ids[2], false],
          [ids[3], true],
          [ids[4], true]
        ])
      }))

    it.effect("bulk options are checked before a job starts: upTo \"abc\", a bad count or a bad filter is a 400 and no job runs", () =>
      Effect.gen(function*() {
        const topic = freshTopic("options")
        yield* deadLetters(topic, 2)
        for (
          const body of [
            { filter: `topic=${topic}`, upTo: "abc", expected: 2 },
            { filter: `topic=${topic}`, upTo: "9999999999999999999", expected: 2 },
            { filter: `topic=${topic}`, upTo: "-1", expected: 2 },
            { filter: `topic=${topic}`, expected: "2" },
            { filter: `topic=${topic}`, expected: 1.5 },
            { filter: `topic=${topic}`, expected: 0 },
            { filter: `topic=${topic}&attempts=abc`, expected: 2 },
            { filter: `topic=${topic}&older=soon`, expected: 2 },
            { filter: `topic=${topic}&key=${"k".repeat(300)}`, expected: 2 }
          ]
        ) {
          const answer = yield* action("/ops/durable/actions/redrive", body)
          expect(answer.status, JSON.stringify(body)).toBe(400)
          expect(JSON.parse(answer.body), JSON.stringify(body)).not.toHaveProperty("job")
        }
        expect((yield* rowsOf(topic)).every((r) => r.dead)).toBe(true)
      }))

    it.effect("the audit line of an action escapes what it was given: a topic holding a newline cannot forge a line", () =>
      Effect.gen(function*() {
        const topic = `${
          freshTopic("forge")
        }\n[info] effect-durable admin: discard of 5000 outbox message(s) by alice from 10.0.0.1`
        const answer = yield* action("/ops/durable/actions/pause", { topic }, { "x-ignored": "1" })
        expect(answer.status).toBe(200)
        const line = logged.find((l) =>
          l.message.startsWith("effect-durable admin: pause topic") && l.annotations.topic === topic
        )
        expect(line).toBeDefined()
        expect(line!.message).not.toMatch(/[\n\r\u2028\u2029]/)
        expect(line!.message).toContain("\\n[info] effect-durable admin: discard of 5000")
        expect(line!.message).toMatch(/ by ops from 127\.0\.0\.1$/)
        // The value itself is kept, structured, in the annotations.
        expect(line!.annotations).toMatchObject({ who: "ops", action: `pause topic ${topic}` })
      }))

    it.effect("every view answers 503 when the database does not answer, the ledger lookup too; a bad key is still a 400", () =>
      Effect.gen(function*() {
        for (
          const path of [
            "/down/",
            "/down/messages",
            "/down/messages/12",
            "/down/dead-letters",
            "/down/inbox",
            "/down/schema",
            "/down/ledger?subject=acme&operation=charge&key=req-1",
            "/down/api/stats",
            "/down/api/count"
          ]
        ) {
          expect((yield* send(path)).status, path).toBe(503)
        }
        expect((yield* send("/down/health/ready")).status).toBe(503)
        // A scrape still answers, with the process's own metrics and the database's absence.
        const scraped = yield* send("/down/metrics")
        expect(scraped.status).toBe(200)
        expect(scraped.body).toContain("effect_durable_scrape_database_up 0")
        expect(
          (yield* send("/ops/durable/ledger?subject=&operation=charge&key=req-1", {
            headers: { authorization: BASIC }
          })).status
        ).toBe(400)
      }))

    it.effect("ids past PostgreSQL's bigint are a 400 on the filters, /messages/:id, /api/count and the actions", () =>
      Effect.gen(function*() {
        const big = "9999999999999999999"
        for (
          const path of [
            `/ops/durable/messages?id=${big}`,
            `/ops/durable/messages/${big}`,
            `/ops/durable/api/count?id=${big}`,
            `/ops/durable/messages?before=${big}`
          ]
        ) {
          expect((yield* signedIn(path)).status, path).toBe(400)
        }
        // Not percent-encoding: the router finds no id there.
        expect([400, 404]).toContain((yield* signedIn("/ops/durable/messages/%E0%A4%A")).status)
        expect((yield* action("/ops/durable/actions/redrive", { ids: [big] })).status).toBe(400)
        expect((yield* action("/ops/durable/actions/discard", { ids: ["9223372036854775808"] })).status).toBe(400)
        expect((yield* action("/ops/durable/inbox/actions/redrive", { ids: [big] })).status).toBe(400)
        expect((yield* action("/ops/durable/actions/discard", { filter: `id=${big}`, expected: 1 })).status).toBe(400)
      }))

    it.effect("with payloads hidden the payload filter is refused (no equality oracle); with payloads shown it narrows the list", () =>
      Effect.gen(function*() {
        const topic = freshTopic("oracle")
        yield* enqueue(topic, 3, (i) => ({ secret: `s-${i}` }))
        yield* deadLetters(topic, 1)
        const right = yield* signedIn(`/ops/durable/messages?topic=${topic}&payload=secret%3Ds-1`)
        const wrong = yield* signedIn(`/ops/durable/messages?topic=${topic}&payload=secret%3Dguess`)
        for (const answer of [right, wrong]) {
          expect(answer.status).toBe(400)
          expect(answer.body).toContain("payloads are hidden on this page")
          expect(answer.body).not.toContain("matching</p>")
        }
        expect(right.body).toBe(wrong.body)
        expect((yield* signedIn(`/ops/durable/api/count?topic=${topic}&payload=secret%3Ds-1`)).status).toBe(400)
        expect(
          (yield* action("/ops/durable/actions/discard", { filter: `topic=${topic}&payload=secret%3Dx`, expected: 1 }))
            .status
        ).toBe(400)
        // The form does not offer it either.
        expect((yield* signedIn(`/ops/durable/messages?topic=${topic}`)).body).not.toContain("name=\"payload\"")
        const shown = yield* send(`/shown/messages?topic=${topic}&payload=secret%3Ds-1`)
        expect(shown.status).toBe(200)
        expect(shown.body).toContain("1 matching")
        expect(shown.body).toContain("name=\"payload\"")
      }))

    it.effect("a bulk job that fails logs why, in the line itself", () =>
      Effect.gen(function*() {
        const topic = freshTopic("fails")
        yield* deadLetters(topic, 2)
        const counted = yield* countOf(`topic=${topic}`)
        const sql = yield* SqlClient.SqlClient
        const table = (yield* DurableSettings).table("outbox_dead")
        // SHARE lets the count and the reads through and holds every write: the batch times out.
        const locked = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const holder = yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql.unsafe(`LOCK TABLE ${table} IN SHARE MODE`)
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(release)
        })).pipe(Effect.forkChild)
        yield* Deferred.await(locked)
        const started = yield* action("/ops/durable/actions/discard", {
          filter: `topic=${topic}`,
          upTo: counted.maxId,
          expected: counted.count
        })
        expect(started.status).toBe(200)
        const { job } = JSON.parse(started.body) as { job: string }
        const failed = yield* eventually(
          Effect.map(signedIn(`/ops/durable/api/jobs/${job}`), (a) =>
            JSON.parse(a.body) as { state: string; error?: string }),
          (j) =>
            j.state !== "running"
        )
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        expect(failed.state).toBe("failed")
        expect(failed.error).toMatch(/timeout/)
        const line = logged.find((l) => l.message.includes(`(job ${job})`) && l.message.includes("failed"))
        expect(line?.message).toMatch(
          new RegExp(
            `^effect-durable admin: discard of all matching by ops failed after 0 of 2 \\(job ${job}\\): .*timeout`
          )
        )
        expect(line?.annotations).toMatchObject({ job, who: "ops" })
        expect((yield* rowsOf(topic)).filter((r) => r.dead)).toHaveLength(2)
      }))
  })
})
