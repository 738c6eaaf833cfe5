/**
 * A handler's typed error as the response HttpApi sends for it. The middleware sees the error
 * as a failure (HttpApiBuilder encodes errors outside every middleware), but a stored 4xx must
 * be the very bytes the client gets, so it is encoded here, inside the transaction.
 *
 * HttpApiBuilder's own encoder does it: an endpoint with the same error schemas (and
 * annotations, which carry the parse options) and no request parts or middleware, whose
 * handler fails with the error, is built once per endpoint with `HttpApiBuilder.endpoint`
 * and run per error. So the response is the builder's, byte for byte: the schema's status
 * and encoding, a `Respondable` error's own response when no schema matches, and no
 * response (the builder's 500) when neither does. Like the builder, it reports the error to
 * the `ErrorReporter`s.
 *
 * Only an error of a schema the endpoint declares is encoded: one declared by a middleware (a
 * security middleware's 401, `ProblemDetails`' 400), or any other, is a refusal or a fault,
 * not the handler's answer, even when it could render itself (`Respondable`).
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import type * as HttpRouter from "effect/http/HttpRouter"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import type * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Schema from "effect/Schema"

/** The error being encoded, for the encoding endpoint's handler. */
class Failure extends Context.Service<Failure, unknown>()("@effect-durable/http/internal/errorResponse/Failure") {}

/** The response for a handler's typed error, or `undefined` when the endpoint has none for it. */
export type Encoder = (
  error: unknown
) => Effect.Effect<
  HttpServerResponse.HttpServerResponse | undefined,
  never,
  HttpServerRequest.HttpServerRequest | HttpServerRequest.ParsedSearchParams | HttpRouter.RouteContext
>

/** The encoder of `endpoint`'s errors; `apiAnnotations` are those of the API it belongs to. */
export const encoder = (
  group: HttpApiGroup.Top,
  endpoint: HttpApiEndpoint.Top,
  apiAnnotations: Context.Context<never>
): Encoder => {
  const annotations = Context.merge(Context.merge(apiAnnotations, group.annotations), endpoint.annotations)
  // `disableCodecs`: the endpoint's error schemas already carry their codecs.
  const errorsOnly = HttpApiEndpoint.make(endpoint.method)(endpoint.identifier, "/", {
    disableCodecs: true,
    error: [...endpoint.error]
  }).annotateMerge(annotations)
  const api = HttpApi.make("@effect-durable/http/errors").add(HttpApiGroup.make(group.identifier).add(errorsOnly))
  const build = HttpApiBuilder.endpoint(
    api as unknown as HttpApi.HttpApi<string, HttpApiGroup.Top>,
    group.identifier,
    endpoint.identifier,
    (() => Effect.flatMap(Failure, Effect.fail)) as never
  ) as unknown as Effect.Effect<Effect.Effect<HttpServerResponse.HttpServerResponse, never, unknown>>
  // Builds the route effect; nothing in it needs a service until it runs.
  const encode = Effect.runSync(build)
  const declared = Array.from(endpoint.error, (schema) => Schema.is(schema as Schema.Schema<unknown>))
  return (error) =>
    !declared.some((is) => is(error)) ? Effect.succeed(undefined) : encode.pipe(
      Effect.provideService(Failure, error),
      Effect.exit,
      Effect.map((exit) => Exit.isSuccess(exit) ? exit.value : undefined)
    ) as ReturnType<Encoder>
}
