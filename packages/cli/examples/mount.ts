// README "The admin page": the page inside an application's own server, under a prefix,
// behind the application's own authentication (run by test/Examples.test.ts).
import * as AdminPage from "@effect-durable/cli/AdminPage"
import * as Durable from "@effect-durable/pg/Durable"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { createServer } from "node:http"

/** What your application knows about the caller: its session cookie, its tokens... */
export type SessionLookup = (
  request: HttpServerRequest.HttpServerRequest
) => Effect.Effect<{ readonly name: string; readonly staff: boolean } | undefined>

/** Your routes, and the admin page under /admin/durable, which only staff reach. */
export const routes = (sessionUser: SessionLookup) =>
  Effect.gen(function*() {
    const admin = yield* AdminPage.make({
      // Who acts, as your authentication knows them: logged with every redrive, discard, pause.
      operator: (request) => Effect.map(sessionUser(request), (user) => user?.name),
      statementTimeout: "3 seconds"
    })
    const staffOnly = <E, R>(app: HttpApp.Default<E, R>) =>
      Effect.gen(function*() {
        const user = yield* sessionUser(yield* HttpServerRequest.HttpServerRequest)
        return user?.staff === true ? yield* app : HttpServerResponse.text("staff only", { status: 403 })
      })
    return HttpRouter.empty.pipe(
      HttpRouter.get("/", HttpServerResponse.text("orders service")),
      HttpRouter.mount("/admin/durable", admin.pipe(HttpRouter.use(staffOnly)))
    )
  })

/** The server, on the substrate of DATABASE_URL: `Layer.launch(server(yourSessionLookup))`. */
export const server = (sessionUser: SessionLookup) =>
  Layer.effectDiscard(Effect.flatMap(routes(sessionUser), (router) => HttpServer.serveEffect(router))).pipe(
    Layer.provide(NodeHttpServer.layer(createServer, { port: 3000 })),
    Layer.provide(Durable.layerConfig())
  )
