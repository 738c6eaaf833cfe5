/**
 * The HTTP server: the bank's API (its security middleware around the idempotency
 * middleware), its OpenAPI document (`/openapi.json`) and Swagger UI (`/docs`),
 * and the webhook receiver, on 127.0.0.1. When it stops it takes no new connections, lets
 * requests in flight finish, and closes idle keep-alive connections at once (a browser's or
 * curl's would otherwise hold the shutdown for seconds).
 */
import * as Idempotency from "@effect-durable/http/Idempotency"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Effect from "effect/Effect"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpApiSwagger from "effect/http-api/HttpApiSwagger"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import { createServer, type Server } from "node:http"
import { AccountsLive } from "./Accounts.js"
import { BankApi } from "./Api.js"
import { AuthenticationLive } from "./Authentication.js"
import { ReceiverLive } from "./Notifications.js"
import { TransfersLive } from "./Transfers.js"

const ApiRoutes = HttpApiBuilder.layer(BankApi, { openapiPath: "/openapi.json" }).pipe(
  Layer.provide([AccountsLive, TransfersLive]),
  // Authentication wraps Idempotency (Api.ts) and gives it its subject, the caller.
  Layer.provide([
    AuthenticationLive,
    Idempotency.layer(BankApi),
    HttpApiMiddleware.layerProblemDetails({ includeDetails: true })
  ])
)

const Routes = Layer.mergeAll(
  ApiRoutes,
  HttpApiSwagger.layer(BankApi, { path: "/docs" }),
  HttpRouter.add("GET", "/", HttpServerResponse.redirect("/docs")),
  ReceiverLive
)

/** Closes idle keep-alive connections while the server stops; cuts the rest after a grace period. */
const drain = (server: Server) =>
  Layer.effectDiscard(Effect.addFinalizer(() =>
    Effect.sync(() => {
      server.closeIdleConnections()
      setInterval(() => server.closeIdleConnections(), 100).unref()
      setTimeout(() => server.closeAllConnections(), 10_000).unref()
    })
  ))

/**
 * The server on `port`; with `fallback`, on a free port when that one is taken. Built after
 * (and so released before) the listening socket: the drain runs as the server closes.
 */
export const ServerLive = (options: { readonly port: number; readonly fallback: boolean }) =>
  Layer.unwrap(Effect.sync(() => {
    const server = createServer()
    const listen = (port: number) => NodeHttpServer.layer(() => server, { port, host: "127.0.0.1" })
    return HttpRouter.serve(Routes, { disableLogger: true, disableListenLog: true }).pipe(
      Layer.merge(drain(server)),
      // The key's header is redacted in the server's spans.
      Layer.provide(Idempotency.layerRedactKeyHeader()),
      Layer.provideMerge(options.fallback ? Layer.catch(listen(options.port), () => listen(0)) : listen(options.port))
    )
  }))
