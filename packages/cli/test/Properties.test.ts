// Whatever a client sends the admin page (ids, filters, bodies, headers), it answers a 2xx, 3xx
// or 4xx, never a 5xx, and keeps answering; whatever an operator types, the command ends with
// a documented exit code for it (0, 1 or 2), never a bug's (70) or a database error's (5).
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as FastCheck from "fast-check"
import { createServer, request as httpRequest } from "node:http"
import * as AdminPage from "../src/AdminPage.js"
import { databaseUrl, deadLetters, enqueue, portOf, type Result, runCli, Substrate } from "./support.js"

const TOKEN = "tok-properties-0123456789"

const Live = HttpRouter.serve(Layer.mergeAll(
  AdminPage.layer({ mount: "/ops/durable", auth: { bearer: Redacted.make(TOKEN) }, batchSize: 3 }),
  AdminPage.layer({ mount: "/shown", showPayloads: true, readOnly: true })
)).pipe(
  Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" })),
  Layer.provideMerge(Substrate)
)

// ---------------------------------------------------------------- what a client may send

/** Text a header may carry (visible ASCII and spaces: what Node lets a client send). */
const headerText = FastCheck.string({
  unit: FastCheck.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
  maxLength: 60
})

/** Any text: every plane, lone surrogates, NUL and controls included. */
const anyText = FastCheck.string({ unit: "binary", maxLength: 40 })

/** What an id may look like: numbers past bigint, negative, zero-padded, or not numbers at all. */
const idText = FastCheck.oneof(
  FastCheck.bigInt({ min: -(10n ** 25n), max: 10n ** 25n }).map(String),
  FastCheck.stringMatching(/^0*[0-9]{1,25}$/),
  anyText
)

const durationText = FastCheck.oneof(
  FastCheck.constantFrom("30m", "7d", "1 hour", "0s", "-5 seconds", "NaN", "1e400 days", "99999999999w"),
  anyText
)

const filterKey = FastCheck.constantFrom(
  "id",
  "topic",
  "key",
  "state",
  "attempts",
  "older",
  "dead",
  "error",
  "payload",
  "header",
  "before",
  "other"
)
const filterValue = FastCheck.oneof(
  idText,
  durationText,
  FastCheck.constantFrom("dead", "ready", "bogus", "a.b=c", "customer.id=42", "=", "a..b=", "x".repeat(2000)),
  anyText
)
/** A query string of the message filter, as a link or a form would make it. */
const filterQuery = FastCheck.array(FastCheck.tuple(filterKey, filterValue), { maxLength: 6 }).map((pairs) =>
  new URLSearchParams(pairs).toString()
)

const view = FastCheck.oneof(
  filterQuery.map((q) => `/messages?${q}`),
  filterQuery.map((q) => `/api/count?${q}`),
  idText.map((id) => `/messages/${encodeURIComponent(id)}`),
  idText.map((id) => `/api/jobs/${encodeURIComponent(id)}`),
  anyText.map((t) => `/dead-letters?${new URLSearchParams({ topic: t })}`),
  anyText.map((t) => `/inbox?${new URLSearchParams({ consumer: t })}`),
  FastCheck.tuple(anyText, anyText, anyText).map(([subject, operation, key]) =>
    `/ledger?${new URLSearchParams({ subject, operation, key })}`
  ),
  FastCheck.constantFrom("/", "/schema", "/api/stats", "/fragments/overview", "/nowhere", "/assets/app.js")
)

/** An action's body: JSON of any shape, the shapes the page reads with wrong values, or not JSON. */
const body = FastCheck.oneof(
  FastCheck.jsonValue({ maxDepth: 6 }).map((v) => JSON.stringify(v)),
  FastCheck.record({
    ids: FastCheck.array(FastCheck.oneof(idText, FastCheck.jsonValue({ maxDepth: 2 })), { maxLength: 5 })
  }).map((v) => JSON.stringify(v)),
  FastCheck.record({
    filter: FastCheck.oneof(filterQuery, FastCheck.jsonValue({ maxDepth: 2 })),
    upTo: FastCheck.oneof(idText, FastCheck.constant(null), FastCheck.double()),
    expected: FastCheck.oneof(FastCheck.integer(), FastCheck.double(), idText)
  }, { requiredKeys: [] }).map((v) => JSON.stringify(v)),
  FastCheck.record({ topic: FastCheck.oneof(anyText, FastCheck.jsonValue({ maxDepth: 2 })) }).map((v) =>
    JSON.stringify(v)
  ),
  FastCheck.integer({ min: 1, max: 20_000 }).map((n) => "[".repeat(n) + "]".repeat(n)),
  anyText
)
const actionPath = FastCheck.constantFrom(
  "/actions/redrive",
  "/actions/discard",
  "/actions/pause",
  "/actions/resume",
  "/inbox/actions/redrive",
  "/inbox/actions/discard",
  "/schema/drift"
)

const authorization = FastCheck.oneof(
  { weight: 6, arbitrary: FastCheck.constant(`Bearer ${TOKEN}`) },
  { weight: 1, arbitrary: headerText },
  { weight: 1, arbitrary: headerText.map((t) => `Bearer ${TOKEN}${t}`) },
  { weight: 1, arbitrary: anyText.map((t) => `Basic ${Buffer.from(t).toString("base64")}`) }
)
const anyHeaders = FastCheck.record({
  authorization,
  "content-type": FastCheck.oneof(
    { weight: 5, arbitrary: FastCheck.constant("application/json") },
    { weight: 1, arbitrary: headerText }
  ),
  "sec-fetch-site": FastCheck.constantFrom("same-origin", "cross-site", "same-site", "none", "bogus"),
  "sec-fetch-mode": FastCheck.constantFrom("cors", "navigate", "no-cors", "bogus"),
  origin: headerText,
  host: FastCheck.oneof(FastCheck.constant("127.0.0.1"), headerText)
}, { requiredKeys: ["authorization"] })
/** Mostly what the page's own script sends (so the handlers run), else anything. */
const headers = FastCheck.oneof(
  {
    weight: 3,
    arbitrary: FastCheck.constant({
      authorization: `Bearer ${TOKEN}`,
      "content-type": "application/json",
      "sec-fetch-site": "same-origin"
    })
  },
  { weight: 1, arbitrary: anyHeaders }
)

const pageRequest = FastCheck.oneof(
  FastCheck.record({ method: FastCheck.constant("GET"), path: view, headers }),
  FastCheck.record({ method: FastCheck.constant("POST"), path: actionPath, headers, body }),
  FastCheck.record({
    method: FastCheck.constantFrom("PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"),
    path: FastCheck.oneof(view, actionPath),
    headers,
    body
  })
)

type PageRequest = {
  readonly method: string
  readonly path: string
  readonly headers: Record<string, string>
  readonly body?: string
}

const send = (port: number, mount: string, r: PageRequest) =>
  new Promise<number>((resolve, reject) => {
    const req = httpRequest({
      host: "127.0.0.1",
      port,
      path: `${mount}${r.path}`,
      method: r.method,
      headers: r.headers,
      // A connection per request: Node's default agent keeps connections alive, and a request
      // written on one the server is closing (after refusing a body it did not read) fails with
      // "socket hang up" before any answer: HTTP/1.1's keep-alive race, not the page's answer.
      agent: false
    }, (res) => {
      res.resume()
      res.on("end", () => resolve(res.statusCode ?? 0))
    })
    req.on("error", reject)
    req.end(r.body)
  })

// ---------------------------------------------------------------- what an operator may type

/** An argument a shell can pass (no NUL). */
const argText = FastCheck.string({ unit: "grapheme", maxLength: 30 }).filter((t) => !t.includes("\u0000"))
const flag = FastCheck.oneof(
  FastCheck.tuple(FastCheck.constantFrom("--id", "--before"), FastCheck.oneof(idText, argText)),
  FastCheck.tuple(FastCheck.constantFrom("--topic", "--error", "--consumer"), argText),
  FastCheck.tuple(FastCheck.constant("--older-than"), FastCheck.oneof(durationText, argText)),
  FastCheck.tuple(FastCheck.constant("--limit"), FastCheck.oneof(FastCheck.integer().map(String), argText))
).map(([name, value]) => [name, value.replaceAll("\u0000", "")] as const)

const command = FastCheck.oneof(
  FastCheck.array(flag, { maxLength: 3 }).map((flags) => ["dead-letters", "list", ...flags.flat(), "--json"]),
  FastCheck.oneof(idText, argText).map((id) => ["dead-letters", "show", id.replaceAll("\u0000", "")]),
  FastCheck.tuple(argText, argText, argText).map(([s, o, k]) => ["ledger", "show", s, o, k]),
  FastCheck.tuple(argText, argText).map(([topic, by]) => ["pause", topic, "--by", by]),
  FastCheck.oneof(durationText, argText).map((
    d
  ) => ["purge", "outbox", "--older-than", d.replaceAll("\u0000", ""), "--dry-run"]),
  FastCheck.array(flag, { maxLength: 2 }).map((flags) => ["dead-letters", "redrive", ...flags.flat(), "--yes"]),
  FastCheck.tuple(argText, FastCheck.oneof(FastCheck.integer().map(String), argText)).map((
    [topic, limit]
  ) => ["explain", "--topic", topic, "--limit", limit])
)

/** Exit codes an input may end with: done, nothing found (or a failed check), a usage error. */
const CLEAN = [0, 1, 2]

describe("properties of the page's and the command's inputs", () => {
  it.layer(Live, { timeout: "180 seconds" })((it) => {
    it.effect("whatever a client sends the page (ids, filters, bodies, headers), it answers below 500 and keeps answering", () =>
      Effect.gen(function*() {
        yield* deadLetters("props", 4, (id) => `boom ${id}`)
        yield* enqueue("props", 3, (i) => ({ customer: { id: i }, secret: `s${i}` }))
        const port = portOf(yield* HttpServer.HttpServer)
        const seen = new Map<number, number>()
        yield* Effect.promise(() =>
          FastCheck.assert(
            FastCheck.asyncProperty(pageRequest, FastCheck.constantFrom("/ops/durable", "/shown"), async (r, mount) => {
              const status = await send(port, mount, r as PageRequest)
              seen.set(status, (seen.get(status) ?? 0) + 1)
              expect(status, `${r.method} ${mount}${r.path}`).toBeGreaterThanOrEqual(200)
              expect(
                status,
                `${r.method} ${mount}${r.path} ${JSON.stringify(r.headers)} ${"body" in r ? r.body : ""}`.slice(0, 2000)
              ).toBeLessThan(500)
            }),
            { numRuns: 400 }
          )
        )
        // It served pages and refused bad input, both.
        expect(seen.get(200)).toBeGreaterThan(0)
        expect(seen.get(400)).toBeGreaterThan(0)
        expect(
          yield* Effect.promise(() => send(port, "/ops/durable", { method: "GET", path: "/health/live", headers: {} }))
        ).toBe(200)
      }))

    it.effect("whatever an operator types (ids, filters, durations, names), the command exits 0, 1 or 2, never 5 or a bug's 70", () =>
      Effect.gen(function*() {
        const ends: Array<Result> = []
        const url = yield* databaseUrl
        const run = (args: ReadonlyArray<string>) => runCli(args, { env: { DATABASE_URL: url } })
        yield* Effect.promise(() =>
          FastCheck.assert(
            FastCheck.asyncProperty(command, command, async (a, b) => {
              // Two at a time: the machine's two cores.
              const results = await Promise.all([run(a), run(b)])
              for (const [args, result] of [[a, results[0]!], [b, results[1]!]] as const) {
                ends.push(result)
                expect(CLEAN, `${args.join(" ")}\n${result.stderr}`).toContain(result.code)
                expect(result.stderr, args.join(" ")).not.toContain("internal error")
              }
            }),
            { numRuns: 7 }
          )
        )
        expect(ends).toHaveLength(14)
      }))
  })
})
