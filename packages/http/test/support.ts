// What the HTTP suites share: a test API served on 127.0.0.1 (port 0) through the
// idempotency middleware, on a migrated substrate in a fresh database, and a client that
// shows the bytes the server sent.
import * as Idempotency from "../src/Idempotency.js"
import * as Subject from "../src/Subject.js"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiError from "effect/http-api/HttpApiError"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as HttpApiSecurity from "effect/http-api/HttpApiSecurity"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as SqlClient from "effect/sql/SqlClient"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Http from "node:http"

// --- the test API ---------------------------------------------------------------------

export class CurrentUser extends Context.Service<CurrentUser, string>()("test/CurrentUser") {}

/** `Bearer user-<name>` is `<name>`; anything else is anonymous. */
export const verify = (authorization: string | undefined): Option.Option<string> =>
  authorization?.startsWith("Bearer user-") === true ? Option.some(authorization.slice("Bearer user-".length)) : Option.none()

export class Authorization extends HttpApiMiddleware.Tag<Authorization>()("test/Authorization", {
  failure: HttpApiError.Unauthorized,
  provides: CurrentUser,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

export class InsufficientFunds extends Schema.TaggedError<InsufficientFunds>()(
  "InsufficientFunds",
  { balance: Schema.Number },
  HttpApiSchema.annotate({ status: 402 })
) {}

const AccountId = HttpApiSchema.param("account", Schema.NumberFromString)
const Amount = Schema.Struct({ amount: Schema.Number })
const Transfer = Schema.Struct({ id: Schema.Number, account: Schema.Number, amount: Schema.Number, by: Schema.String })

export class Bank extends HttpApiGroup.make("bank")
  .add(
    HttpApiEndpoint.post("transfer")`/accounts/${AccountId}/transfers`
      .setPayload(Amount)
      .addSuccess(Transfer, { status: 201 })
      .addError(InsufficientFunds)
      .addError(HttpApiError.NotFound)
      .pipe(Idempotency.endpoint({ required: true }))
  )
  .add(
    HttpApiEndpoint.patch("adjust")`/accounts/${AccountId}/transfers`
      .setPayload(Amount)
      .addSuccess(Transfer)
      .pipe(Idempotency.endpoint({ required: true }))
  )
  .add(
    HttpApiEndpoint.post("deposit")`/accounts/${AccountId}/deposits`
      .setPayload(Amount)
      .addSuccess(Transfer, { status: 201 })
      .pipe(Idempotency.endpoint({ required: false }))
  )
  .add(HttpApiEndpoint.post("boom")`/accounts/${AccountId}/boom`.pipe(Idempotency.endpoint({ required: true })))
  .add(HttpApiEndpoint.post("unavailable")`/accounts/${AccountId}/unavailable`.pipe(Idempotency.endpoint({ required: true })))
  .add(
    HttpApiEndpoint.post("note")`/accounts/${AccountId}/notes`
      .setPayload(HttpApiSchema.Text())
      .addSuccess(HttpApiSchema.Text())
      .pipe(Idempotency.endpoint({ required: true }))
  )
  .add(
    HttpApiEndpoint.post("bytes")`/accounts/${AccountId}/bytes`
      .setPayload(HttpApiSchema.Uint8Array())
      .addSuccess(HttpApiSchema.Uint8Array())
      .pipe(Idempotency.endpoint({ required: true }))
  )
  .add(
    HttpApiEndpoint.post("form")`/accounts/${AccountId}/forms`
      .setPayload(Schema.Struct({ text: Schema.String }).pipe(HttpApiSchema.withEncoding({ kind: "UrlParams" })))
      .addSuccess(Schema.String)
      .pipe(Idempotency.endpoint({ required: true }))
  )
  .add(HttpApiEndpoint.post("stream")`/accounts/${AccountId}/streams`.pipe(Idempotency.endpoint({ required: true })))
  .add(HttpApiEndpoint.post("large")`/accounts/${AccountId}/large`.pipe(Idempotency.endpoint({ required: true })))
  .add(HttpApiEndpoint.post("headers")`/accounts/${AccountId}/headers`.pipe(Idempotency.endpoint({ required: true })))
  .add(
    HttpApiEndpoint.post("unmarked")`/accounts/${AccountId}/unmarked`
      .addSuccess(Schema.String, { status: 201 })
      .pipe(Idempotency.endpoint({ required: true }))
  )
  .add(HttpApiEndpoint.post("violate")`/accounts/${AccountId}/violations`.pipe(Idempotency.endpoint({ required: true })))
  .add(HttpApiEndpoint.get("count")`/accounts/${AccountId}/transfers`.addSuccess(Schema.Number))
  .add(HttpApiEndpoint.put("rename")`/accounts/${AccountId}`.setPayload(Amount).addSuccess(Schema.Number))
  .add(HttpApiEndpoint.del("close")`/accounts/${AccountId}`.addSuccess(Schema.Number))
  .middleware(Authorization)
{}

export class Health extends HttpApiGroup.make("health").add(HttpApiEndpoint.get("health")`/health`.addSuccess(Schema.String)) {}

export class TestApi extends HttpApi.make("test").add(Bank).add(Health).prefix("/v1") {}

// --- what the handlers did ----------------------------------------------------------------

/** Handler runs per account (test accounts are fresh per test): counted even when rolled back. */
const runs = new Map<number, number>()
export const executions = (account: number) => runs.get(account) ?? 0
const ran = (account: number) => Effect.sync(() => runs.set(account, executions(account) + 1))

/** Gates a test opens to let the handler of an account finish (after its write). */
const gates = new Map<number, Deferred.Deferred<void>>()
export const gate = (account: number) =>
  Effect.tap(Deferred.make<void>(), (deferred) => Effect.sync(() => gates.set(account, deferred)))
const passGate = (account: number) => {
  const deferred = gates.get(account)
  return deferred === undefined ? Effect.void : Deferred.await(deferred)
}

let accounts = 1000
/** An account no other test uses. */
export const freshAccount = () => ++accounts

export const TRANSFER_TOPIC = "transfer-made"

const BankLive = HttpApiBuilder.group(TestApi, "bank", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const outbox = yield* Outbox.Outbox
    const insert = (account: number, amount: number, by: string) =>
      sql<{ id: number }>`INSERT INTO transfers (account, amount, by_user) VALUES (${account}, ${amount}, ${by}) RETURNING id`.pipe(
        Effect.map((rows) => rows[0]!.id),
        Effect.orDie
      )
    return handlers
      .handle(
        "transfer",
        Idempotency.executing(({ path, payload }) =>
          Effect.gen(function*() {
            yield* ran(path.account)
            const by = yield* CurrentUser
            if (payload.amount === 404) return yield* new HttpApiError.NotFound()
            const id = yield* insert(path.account, payload.amount, by)
            yield* Effect.orDie(outbox.enqueue(TRANSFER_TOPIC, { transfer: id }))
            yield* passGate(path.account)
            // A rejection after a write: stored (and so are its writes).
            if (payload.amount > 1000) return yield* new InsufficientFunds({ balance: 1000 })
            return { id, account: path.account, amount: payload.amount, by }
          })
        )
      )
      .handle(
        "adjust",
        Idempotency.executing(({ path, payload }) =>
          Effect.gen(function*() {
            yield* ran(path.account)
            const id = yield* insert(path.account, payload.amount, "adjust")
            return { id, account: path.account, amount: payload.amount, by: "adjust" }
          })
        )
      )
      .handle(
        "deposit",
        Idempotency.executing(({ path, payload }) =>
          Effect.gen(function*() {
            yield* ran(path.account)
            const id = yield* insert(path.account, payload.amount, "deposit")
            return { id, account: path.account, amount: payload.amount, by: "deposit" }
          })
        )
      )
      .handle(
        "boom",
        Idempotency.executing(({ path }) =>
          Effect.gen(function*() {
            yield* ran(path.account)
            yield* insert(path.account, 1, "boom")
            return yield* Effect.die(new Error("kaboom"))
          })
        )
      )
      .handle(
        "unavailable",
        Idempotency.executing(({ path }) =>
          Effect.gen(function*() {
            yield* ran(path.account)
            yield* insert(path.account, 1, "unavailable")
            yield* Effect.orDie(outbox.enqueue(TRANSFER_TOPIC, { unavailable: path.account }))
            return HttpServerResponse.text("try later", { status: 503 })
          })
        )
      )
      .handle(
        "note",
        Idempotency.executing(({ path, payload }) =>
          Effect.as(ran(path.account), `noted ${payload.length} characters`)
        )
      )
      .handle(
        "bytes",
        Idempotency.executing(({ path, payload }) => Effect.as(ran(path.account), new Uint8Array([...payload, 255])))
      )
      .handle(
        "form",
        Idempotency.executing(({ path, payload }) => Effect.as(ran(path.account), `form ${payload.text}`))
      )
      .handle(
        "stream",
        Idempotency.executing(({ path }) =>
          Effect.as(
            ran(path.account),
            HttpServerResponse.stream(Stream.make("a", "b", "c").pipe(Stream.encodeText), { contentType: "text/plain", status: 201 })
          )
        )
      )
      .handle(
        "large",
        Idempotency.executing(({ path }) =>
          Effect.gen(function*() {
            yield* ran(path.account)
            yield* insert(path.account, 1, "large")
            return HttpServerResponse.text("x".repeat(70 * 1024), { status: 201 })
          })
        )
      )
      .handle(
        "headers",
        Idempotency.executing(({ path }) =>
          Effect.gen(function*() {
            yield* ran(path.account)
            const id = yield* insert(path.account, 1, "headers")
            // {"z":1,"a":2}: member order is kept byte for byte.
            return HttpServerResponse.text(`{"z":1,"a":2,"id":${id}}`, {
              status: 201,
              contentType: "application/json",
              headers: { location: `/v1/transfers/${id}`, etag: `"r${id}"`, "x-request-id": `req-${id}` }
            }).pipe(HttpServerResponse.setCookieUnsafe("session", `s-${id}`))
          })
        )
      )
      .handle(
        "violate",
        Idempotency.executing(({ path }) =>
          Effect.gen(function*() {
            yield* ran(path.account)
            yield* insert(path.account, 1, "violate")
            // A deferred foreign key: the statement passes, COMMIT fails.
            yield* Effect.orDie(sql`INSERT INTO children (parent) VALUES (${-path.account})`)
          })
        )
      )
      .handle("unmarked", ({ path }) => Effect.as(ran(path.account), "ran without executing"))
      .handle("count", ({ path }) =>
        sql<{ n: number }>`SELECT count(*)::int AS n FROM transfers WHERE account = ${path.account}`.pipe(
          Effect.map((rows) => rows[0]!.n),
          Effect.orDie
        ))
      .handle("rename", ({ path }) => Effect.as(ran(path.account), executions(path.account)))
      .handle("close", ({ path }) => Effect.as(ran(path.account), executions(path.account)))
  }))

const HealthLive = HttpApiBuilder.group(TestApi, "health", (handlers) => handlers.handle("health", () => Effect.succeed("ok")))

/** The API's own security: `user-revoked` passes `Subject.identify` but not this (a token revoked since). */
const AuthorizationLive = Layer.succeed(
  Authorization,
  Authorization.of({
    bearer: (token) => {
      const user = verify(`Bearer ${Redacted.value(token)}`)
      return Option.isSome(user) && user.value !== "revoked"
        ? Effect.succeed(user.value)
        : Effect.fail(new HttpApiError.Unauthorized())
    }
  })
)

const Identify = Subject.identify((request) => Effect.succeed(verify(request.headers.authorization)))

/** A plain route (any method) through `Idempotency.wrapper`: echoes the body, counts its runs. */
const plainRoutes = (options: Idempotency.Options) =>
  HttpRouter.addAll(Effect.gen(function*() {
    const idempotent = yield* Idempotency.wrapper(options)
    const sql = yield* SqlClient.SqlClient
    const handler = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const { params } = yield* HttpRouter.RouteContext
      const account = Number(params.account)
      yield* ran(account)
      yield* Effect.orDie(sql`INSERT INTO transfers (account, amount, by_user) VALUES (${account}, 1, 'plain')`)
      const body = yield* Effect.orDie(request.text)
      if (body === "fail") return yield* Effect.fail(new Error("a plain failure"))
      return HttpServerResponse.text(`${request.method} ${body}`, { status: body === "reject" ? 409 : 200 })
    })
    return [HttpRouter.route("*", "/plain/:account", idempotent.required(handler))]
  })).pipe(Layer.provide(Identify.layer))

const Tables = Layer.effectDiscard(Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS transfers (
    id serial PRIMARY KEY, account int NOT NULL, amount numeric NOT NULL, by_user text NOT NULL)`
  yield* sql`CREATE TABLE IF NOT EXISTS parents (id int PRIMARY KEY)`
  yield* sql`CREATE TABLE IF NOT EXISTS children (parent int REFERENCES parents DEFERRABLE INITIALLY DEFERRED)`
}))

/** Every route of the test server, over a substrate provided from outside. */
export const routes = (options: Idempotency.Options = {}) =>
  Layer.mergeAll(
    HttpRouter.addHttpApi(TestApi, { openapiPath: "/openapi.json" }).pipe(
      Layer.provide([BankLive, HealthLive]),
      Layer.provide(AuthorizationLive),
      Layer.provide(Idempotency.middleware(TestApi, options).combine(Identify).layer)
    ),
    plainRoutes(options)
  ).pipe(Layer.provide(Tables))

/** The test API and the plain route on 127.0.0.1, port 0, over a fresh substrate; the `HttpServer` stays in the output. */
export const server = (options: Idempotency.Options = {}, substrate: TestSubstrate.Options = {}) =>
  HttpRouter.serve(routes(options), { disableLogger: true, disableListenLog: true }).pipe(
    Layer.provideMerge(NodeHttpServer.layer(Http.createServer, { port: 0, host: "127.0.0.1" })),
    Layer.provideMerge(
      TestSubstrate.layer({ ...substrate, database: { maxConnections: 40, applicationName: "http-test", ...substrate.database } })
    )
  )

// --- the client -----------------------------------------------------------------------------

export interface Reply {
  readonly status: number
  readonly headers: Http.IncomingHttpHeaders
  readonly body: Buffer
  readonly text: string
}

export interface Call {
  readonly method?: string
  readonly body?: string | Buffer
  readonly key?: string
  readonly user?: string
  readonly headers?: Readonly<Record<string, string | ReadonlyArray<string>>>
  /** Send the body in chunks without Content-Length. */
  readonly chunked?: boolean
}

/** One request on a connection of its own; the reply with the exact bytes of its body. */
export const request = (port: number, path: string, call: Call = {}): Promise<Reply> =>
  new Promise((resolve, reject) => {
    const headers: Record<string, string | Array<string>> = {}
    if (call.body !== undefined && !call.chunked) headers["content-length"] = String(Buffer.byteLength(call.body))
    if (call.body !== undefined) headers["content-type"] = "application/json"
    if (call.key !== undefined) headers["idempotency-key"] = call.key
    if (call.user !== undefined) headers.authorization = `Bearer user-${call.user}`
    for (const [name, value] of Object.entries(call.headers ?? {})) headers[name] = typeof value === "string" ? value : [...value]
    const req = Http.request({ host: "127.0.0.1", port, path, method: call.method ?? "POST", headers, agent: false }, (res) => {
      const chunks: Array<Buffer> = []
      res.on("data", (chunk: Buffer) => chunks.push(chunk))
      res.on("end", () => {
        const body = Buffer.concat(chunks)
        resolve({ status: res.statusCode!, headers: res.headers, body, text: body.toString("utf8") })
      })
      res.on("error", reject)
    })
    req.on("error", reject)
    if (call.body !== undefined && call.chunked) {
      const bytes = Buffer.from(call.body)
      for (let at = 0; at < bytes.length; at += 16 * 1024) req.write(bytes.subarray(at, at + 16 * 1024))
    } else if (call.body !== undefined) {
      req.write(call.body)
    }
    req.end()
  })

/** The server's port. */
export const port = Effect.map(HttpServer.HttpServer, (server) => (server.address as HttpServer.TcpAddress).port)

/** `request` on the test server, as an Effect. */
export const send = (path: string, call: Call = {}) => Effect.flatMap(port, (p) => Effect.promise(() => request(p, path, call)))

/** JSON body of a reply. */
export const json = (reply: Reply): unknown => JSON.parse(reply.text)

/** Rows in the transfers table of an account. */
export const transfersOf = (account: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ n: number }>`SELECT count(*)::int AS n FROM transfers WHERE account = ${account}`,
      (rows) => rows[0]!.n
    ))

/** Ledger records of an operation (`POST /v1/accounts/:account/transfers`) for a key. */
export const recordsOf = (operation: string, key: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.mutation_records WHERE operation = ${operation} AND key = ${key}`,
      (rows) => rows[0]!.n
    ))
