// README "The admin page": the page inside an application's own server, under a prefix,
// behind the application's own authentication (run by test/Examples.test.ts).
import * as AdminPage from "@effect-durable/cli/AdminPage"
import * as Durable from "@effect-durable/pg/Durable"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import { createServer } from "node:http"

/** What your application knows about the caller: its session cookie, its tokens... */
export type SessionLookup = (
  request: HttpServerRequest.HttpServerRequest
) => Effect.Effect<{ readonly name: string; readonly staff: boolean } | undefined>

/** A route middleware: only staff get past it. */
const staffOnly = (sessionUser: SessionLookup) =>
  HttpRouter.middleware((httpEffect) =>
    Effect.gen(function*() {
      const user = yield* sessionUser(yield* HttpServerRequest.HttpServerRequest)
      return user?.staff === true ? yield* httpEffect : HttpServerResponse.text("staff only", { status: 403 })
    })
  ).layer

/** Your routes, and the admin page under /admin/durable, which only staff reach. */
export const routes = (sessionUser: SessionLookup) =>
  Layer.mergeAll(
    HttpRouter.add("GET", "/", HttpServerResponse.text("orders service")),
    AdminPage.layer({
      mount: "/admin/durable",
      // Who acts, as your authentication knows them: logged with every redrive, discard, pause.
      operator: (request) => Effect.map(sessionUser(request), (user) => user?.name),
      statementTimeout: "3 seconds"
    }).pipe(Layer.provide(staffOnly(sessionUser)))
  )

/** The server, on the substrate of DATABASE_URL: `Layer.launch(server(yourSessionLookup))`. */
export const server = (sessionUser: SessionLookup) =>
  HttpRouter.serve(routes(sessionUser)).pipe(
    Layer.provide(NodeHttpServer.layer(createServer, { port: 3000 })),
    Layer.provide(Durable.layerConfig())
  )
