// What the HTTP suites share: a test API served on 127.0.0.1 (port 0) through the
// idempotency middleware, on a migrated substrate in a fresh database, and a client that
// shows the bytes the server sent.
import * as Outbox from "@effect-durable/pg/Outbox"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiError from "effect/http-api/HttpApiError"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as HttpApiSecurity from "effect/http-api/HttpApiSecurity"
import * as HttpMiddleware from "effect/http/HttpMiddleware"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as Stream from "effect/Stream"
import * as Http from "node:http"
import * as Idempotency from "../src/Idempotency.js"
import * as Subject from "../src/Subject.js"

// --- the test API ---------------------------------------------------------------------

export class CurrentUser extends Context.Service<CurrentUser, string>()("test/CurrentUser") {}

/** `Bearer user-<name>` is `<name>`; anything else is anonymous. */
export const verify = (authorization: string | undefined): Option.Option<string> =>
  authorization?.startsWith("Bearer user-") === true
    ? Option.some(authorization.slice("Bearer user-".length))
    : Option.none()

/**
 * The API's own security. It wraps the idempotency middleware (a group middleware, added after
 * the endpoints'), so a refused credential never reaches the ledger, and it provides the
 * `Subject` the idempotency middleware keys its records by.
 */
export class Authorization
  extends HttpApiMiddleware.Service<Authorization, { provides: CurrentUser | Subject.Subject }>()(
    "test/Authorization",
    {
      error: HttpApiError.Unauthorized,
      security: { bearer: HttpApiSecurity.bearer }
    }
  )
{}

export class InsufficientFunds extends Schema.TaggedError<InsufficientFunds>()(
  "InsufficientFunds",
  { balance: Schema.Number },
  { httpApiStatus: 402 }
) {}

const params = { account: Schema.Number }
const Amount = Schema.Struct({ amount: Schema.Number })
const Transfer = Schema.Struct({ id: Schema.Number, account: Schema.Number, amount: Schema.Number, by: Schema.String })
/** A recursive field: HttpApi decodes it level by level, so a deep enough one overflows the stack. */
export interface Tree {
  readonly children: ReadonlyArray<Tree>
}
const Tree: Schema.Codec<Tree> = Schema.Struct({
  children: Schema.Array(Schema.suspend((): Schema.Codec<Tree> => Tree))
})
const Text = Schema.String.pipe(HttpApiSchema.asText())
const Bytes = Schema.Uint8Array.pipe(HttpApiSchema.asUint8Array())

export class Bank extends HttpApiGroup.make("bank")
  .add(
    HttpApiEndpoint.post("transfer", "/accounts/:account/transfers", {
      params,
      payload: Amount,
      success: Transfer.pipe(HttpApiSchema.status(201)),
      error: [InsufficientFunds, HttpApiError.NotFoundNoContent]
    }).pipe(Idempotency.endpoint({ required: true })),
    HttpApiEndpoint.patch("adjust", "/accounts/:account/transfers", { params, payload: Amount, success: Transfer })
      .pipe(Idempotency.endpoint({ required: true })),
    HttpApiEndpoint.post("deposit", "/accounts/:account/deposits", {
      params,
      payload: Amount,
      success: Transfer.pipe(HttpApiSchema.status(201)),
      error: InsufficientFunds
    }).pipe(Idempotency.endpoint({ required: false })),
    // `.middleware(Idempotency)` alone: the key is required.
    HttpApiEndpoint.post("boom", "/accounts/:account/boom", { params }).middleware(Idempotency.Idempotency),
    HttpApiEndpoint.post("unavailable", "/accounts/:account/unavailable", { params }).pipe(
      Idempotency.endpoint({ required: true })
    ),
    HttpApiEndpoint.post("note", "/accounts/:account/notes", { params, payload: Text, success: Text })
      .pipe(Idempotency.endpoint({ required: true })),
    HttpApiEndpoint.post("bytes", "/accounts/:account/bytes", { params, payload: Bytes, success: Bytes })
      .pipe(Idempotency.endpoint({ required: true })),
    HttpApiEndpoint.post("form", "/accounts/:account/forms", {
      params,
      payload: Schema.Struct({ text: Schema.String }).pipe(HttpApiSchema.asFormUrlEncoded()),
      success: Schema.String
    }).pipe(Idempotency.endpoint({ required: true })),
    HttpApiEndpoint.post("plant", "/accounts/:account/trees", {
      params,
      payload: Schema.Struct({ tree: Tree }),
      success: Schema.Number.pipe(HttpApiSchema.status(201))
    }).pipe(Idempotency.endpoint({ required: false })),
    HttpApiEndpoint.post("stream", "/accounts/:account/streams", { params }).pipe(
      Idempotency.endpoint({ required: true })
    ),
    HttpApiEndpoint.post("large", "/accounts/:account/large", { params }).pipe(
      Idempotency.endpoint({ required: true })
    ),
    HttpApiEndpoint.post("headers", "/accounts/:account/headers", { params }).pipe(
      Idempotency.endpoint({ required: true })
    ),
    // Without the middleware: its key is ignored.
    HttpApiEndpoint.post("unmarked", "/accounts/:account/unmarked", {
      params,
      success: Schema.String.pipe(HttpApiSchema.status(201))
    }),
    HttpApiEndpoint.post("violate", "/accounts/:account/violations", { params }).pipe(
      Idempotency.endpoint({ required: true })
    ),
    // Not idempotent, said so: a request with a key is refused.
    HttpApiEndpoint.patch("touch", "/accounts/:account/touches", { params, success: Schema.Number }).pipe(
      Idempotency.notIdempotent()
    ),
    HttpApiEndpoint.get("count", "/accounts/:account/transfers", { params, success: Schema.Number }),
    HttpApiEndpoint.put("rename", "/accounts/:account", { params, payload: Amount, success: Schema.Number }),
    HttpApiEndpoint.delete("close", "/accounts/:account", { params, success: Schema.Number })
  )
  .middleware(Authorization)
{}

/** An idempotent endpoint without the API's security: its subject comes from `Subject.Identify`, which never refuses. */
export class Public extends HttpApiGroup.make("public")
  .add(
    HttpApiEndpoint.post("tip", "/public/:account/tips", { params, payload: Amount, success: Schema.Number })
      .pipe(Idempotency.endpoint({ required: true }))
  )
  .middleware(Subject.Identify)
{}

export class Health
  extends HttpApiGroup.make("health").add(HttpApiEndpoint.get("health", "/health", { success: Schema.String }))
{}

/** `ProblemDetails` wraps every endpoint: a request that does not decode is a 400 problem, never stored. */
export class TestApi
  extends HttpApi.make("test").add(Bank, Public, Health).prefix("/v1").middleware(HttpApiMiddleware.ProblemDetails)
{}

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
      sql<
        { id: number }
      >`INSERT INTO transfers (account, amount, by_user) VALUES (${account}, ${amount}, ${by}) RETURNING id`.pipe(
        Effect.map((rows) => rows[0]!.id),
        Effect.orDie
      )
    return handlers
      .handle("transfer", ({ params, payload }) =>
        Effect.gen(function*() {
          yield* ran(params.account)
          const by = yield* CurrentUser
          if (payload.amount === 404) return yield* new HttpApiError.NotFound()
          const id = yield* insert(params.account, payload.amount, by)
          yield* Effect.orDie(outbox.enqueue(TRANSFER_TOPIC, { transfer: id }))
          yield* passGate(params.account)
          // A rejection after a write: stored (and so are its writes).
          if (payload.amount > 1000) return yield* new InsufficientFunds({ balance: 1000 })
          return { id, account: params.account, amount: payload.amount, by }
        }))
      .handle("adjust", ({ params, payload }) =>
        Effect.gen(function*() {
          yield* ran(params.account)
          const id = yield* insert(params.account, payload.amount, "adjust")
          return { id, account: params.account, amount: payload.amount, by: "adjust" }
        }))
      .handle("deposit", ({ params, payload }) =>
        Effect.gen(function*() {
          yield* ran(params.account)
          const id = yield* insert(params.account, payload.amount, "deposit")
          if (payload.amount > 1000) return yield* new InsufficientFunds({ balance: 1000 })
          return { id, account: params.account, amount: payload.amount, by: "deposit" }
        }))
      .handle("boom", ({ params }) =>
        Effect.gen(function*() {
          yield* ran(params.account)
          yield* insert(params.account, 1, "boom")
          return yield* Effect.die(new Error("kaboom"))
        }))
      .handle("unavailable", ({ params }) =>
        Effect.gen(function*() {
          yield* ran(params.account)
          yield* insert(params.account, 1, "unavailable")
          yield* Effect.orDie(outbox.enqueue(TRANSFER_TOPIC, { unavailable: params.account }))
          return HttpServerResponse.text("try later", { status: 503 })
        }))
      .handle("note", ({ params, payload }) => Effect.as(ran(params.account), `noted ${payload.length} characters`))
      .handle("bytes", ({ params, payload }) => Effect.as(ran(params.account), new Uint8Array([...payload, 255])))
      .handle("form", ({ params, payload }) => Effect.as(ran(params.account), `form ${payload.text}`))
      .handle("plant", ({ params, payload }) =>
        Effect.gen(function*() {
          yield* ran(params.account)
          yield* insert(params.account, payload.tree.children.length, "plant")
          return executions(params.account)
        }))
      .handle("stream", ({ params }) =>
        Effect.as(
          ran(params.account),
          HttpServerResponse.stream(Stream.make("a", "b", "c").pipe(Stream.encodeText), {
            contentType: "text/plain",
            status: 201
          })
        ))
      .handle("large", ({ params }) =>
        Effect.gen(function*() {
          yield* ran(params.account)
          yield* insert(params.account, 1, "large")
          return HttpServerResponse.text("x".repeat(70 * 1024), { status: 201 })
        }))
      .handle("headers", ({ params }) =>
        Effect.gen(function*() {
          yield* ran(params.account)
          const id = yield* insert(params.account, 1, "headers")
          // {"z":1,"a":2}: member order is kept byte for byte.
          return HttpServerResponse.text(`{"z":1,"a":2,"id":${id}}`, {
            status: 201,
            contentType: "application/json",
            headers: { location: `/v1/transfers/${id}`, etag: `"r${id}"`, "x-request-id": `req-${id}` }
          }).pipe(HttpServerResponse.setCookieUnsafe("session", `s-${id}`))
        }))
      .handle("violate", ({ params }) =>
        Effect.gen(function*() {
          yield* ran(params.account)
          yield* insert(params.account, 1, "violate")
          // A deferred foreign key: the statement passes, COMMIT fails.
          yield* Effect.orDie(sql`INSERT INTO children (parent) VALUES (${-params.account})`)
        }))
      .handle("unmarked", ({ params }) => Effect.as(ran(params.account), "ran without the middleware"))
      .handle("touch", ({ params }) => Effect.map(ran(params.account), () => executions(params.account)))
      .handle("count", ({ params }) =>
        sql<{ n: number }>`SELECT count(*)::int AS n FROM transfers WHERE account = ${params.account}`.pipe(
          Effect.map((rows) =>
            rows[0]!.n
          ),
          Effect.orDie
        ))
      .handle("rename", ({ params }) => Effect.as(ran(params.account), executions(params.account)))
      .handle("close", ({ params }) => Effect.as(ran(params.account), executions(params.account)))
  }))

const PublicLive = HttpApiBuilder.group(
  TestApi,
  "public",
  (handlers) => handlers.handle("tip", ({ params, payload }) => Effect.as(ran(params.account), payload.amount))
)

const HealthLive = HttpApiBuilder.group(
  TestApi,
  "health",
  (handlers) => handlers.handle("health", () => Effect.succeed("ok"))
)

/** `user-revoked` is a user `verify` knows, whose token this refuses (revoked since). */
const AuthorizationLive = Layer.succeed(
  Authorization,
  Authorization.of({
    bearer: (httpEffect, { credential }) => {
      const user = verify(`Bearer ${Redacted.value(credential)}`)
      return Option.isSome(user) && user.value !== "revoked"
        ? httpEffect.pipe(Effect.provideService(CurrentUser, user.value), Effect.provideService(Subject.Subject, user))
        : Effect.fail(new HttpApiError.Unauthorized())
    }
  })
)

const IdentifyLive = Subject.layerIdentify((request) => Effect.succeed(verify(request.headers.authorization)))

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
    return [
      HttpRouter.route("*", "/plain/:account", idempotent.required(handler)),
      HttpRouter.route("PATCH", "/plain-touch/:account", idempotent.notIdempotent(handler))
    ]
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
    HttpApiBuilder.layer(TestApi, { openapiPath: "/openapi.json" }).pipe(
      Layer.provide([BankLive, PublicLive, HealthLive]),
      Layer.provide([
        AuthorizationLive,
        IdentifyLive,
        HttpApiMiddleware.layerProblemDetails({ includeDetails: true }),
        Idempotency.layer(TestApi, options)
      ])
    ),
    plainRoutes(options)
  ).pipe(Layer.provide(Tables))

/** The server span records every request and response header (redacted names as `<redacted>`). */
const RecordHeaders = Layer.succeed(HttpMiddleware.TracerHeaderFilter)(() => true)

export interface ServeOptions {
  /** The platform's request log (`Sent HTTP response` per request). Default off. */
  readonly logRequests?: boolean
}

/** Serves `routes` as the suites' servers are served: on 127.0.0.1, port 0, the key's header redacted. */
export const serve = <A, E, R>(
  routes: Layer.Layer<A, E, R>,
  options: Idempotency.Options = {},
  serveOptions: ServeOptions = {}
) =>
  HttpRouter.serve(routes, { disableLogger: serveOptions.logRequests !== true, disableListenLog: true }).pipe(
    Layer.provide([Idempotency.layerRedactKeyHeader(options), RecordHeaders]),
    Layer.provideMerge(NodeHttpServer.layer(Http.createServer, { port: 0, host: "127.0.0.1" }))
  )

/** The test API and the plain route on 127.0.0.1, port 0, over a fresh substrate; the `HttpServer` stays in the output. */
export const server = (
  options: Idempotency.Options = {},
  substrate: TestSubstrate.Options = {},
  serveOptions: ServeOptions = {}
) =>
  serve(routes(options), options, serveOptions).pipe(
    Layer.provideMerge(
      TestSubstrate.layer({
        ...substrate,
        database: { maxConnections: 40, applicationName: "http-test", ...substrate.database }
      })
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
    for (const [name, value] of Object.entries(call.headers ?? {})) {
      headers[name] = typeof value === "string"
        ? value
        : [...value]
    }
    const req = Http.request(
      { host: "127.0.0.1", port, path, method: call.method ?? "POST", headers, agent: false },
      (res) => {
        const chunks: Array<Buffer> = []
        res.on("data", (chunk: Buffer) => chunks.push(chunk))
        res.on("end", () => {
          const body = Buffer.concat(chunks)
          resolve({ status: res.statusCode!, headers: res.headers, body, text: body.toString("utf8") })
        })
        res.on("error", reject)
      }
    )
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
export const port = Effect.map(HttpServer.HttpServer, ({ address }) => ("port" in address ? address.port : 0))

/** `request` on the test server, as an Effect. */
export const send = (path: string, call: Call = {}) =>
  Effect.flatMap(port, (p) => Effect.promise(() => request(p, path, call)))

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
      sql<
        { n: number }
      >`SELECT count(*)::int AS n FROM durable.mutation_records WHERE operation = ${operation} AND key = ${key}`,
      (rows) => rows[0]!.n
    ))
