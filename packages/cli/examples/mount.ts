// The README's example: the admin page inside an application's own server, under a prefix,
// behind the application's own authentication. Type-checked with the tests; the browser
// suite mounts the page the same way.
import * as AdminPage from "@effect-durable/cli/AdminPage"
import * as Durable from "@effect-durable/pg/Durable"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { createServer } from "node:http"

/** Your application's session lookup (yours: verify the session cookie, find the user). */
declare const sessionUser: (
  request: HttpServerRequest.HttpServerRequest
) => Effect.Effect<{ readonly name: string; readonly staff: boolean } | undefined>

// Only staff reach the page; everyone else gets 403 before the page sees the request.
const staffOnly = HttpMiddleware.make((app) =>
  Effect.gen(function*() {
    const user = yield* sessionUser(yield* HttpServerRequest.HttpServerRequest)
    return user?.staff === true ? yield* app : HttpServerResponse.text("staff only", { status: 403 })
  })
)

export const Server = Layer.scopedDiscard(Effect.gen(function*() {
  const admin = yield* AdminPage.make({
    // Who acts, as your authentication knows them: logged with every redrive, discard, pause.
    operator: (request) => Effect.map(sessionUser(request), (user) => user?.name),
    statementTimeout: "3 seconds"
  })
  yield* HttpServer.serveEffect(HttpRouter.empty.pipe(
    HttpRouter.get("/", HttpServerResponse.text("orders service")),
    HttpRouter.mount("/admin/durable", admin.pipe(HttpRouter.use(staffOnly)))
  ))
})).pipe(
  Layer.provide(NodeHttpServer.layer(createServer, { port: 3000 })),
  Layer.provide(Durable.layerConfig())
)

export const main = () => Layer.launch(Server).pipe(NodeRuntime.runMain)
