/**
 * A request's JSON body for a handler of your own, read the way the idempotency middleware
 * reads bodies: bounded in bytes (over the bound, a 413 can still be answered on a request
 * received whole) and in nesting depth (checked before anything parses it), and refused with
 * the rule it broke. `@effect-durable/workflow`'s deferred endpoint reads its bodies so.
 *
 * @since 0.2.0
 */
import * as Effect from "effect/Effect"
import type * as HttpServerError from "effect/http/HttpServerError"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as JsonDepth from "./internal/jsonDepth.js"
import * as Body from "./internal/requestBody.js"

/** A body refused: over `maxBytes`, nested over `maxDepth`, or not JSON. */
export class BodyRefused extends Schema.TaggedError<BodyRefused>("@effect-durable/http/BodyRefused")("BodyRefused", {
  rule: Schema.Literals(["too-large", "too-deep", "not-json"]),
  detail: Schema.String
}) {
  override get message() {
    return `request body refused: ${this.detail}`
  }
  /** The status to answer with: 413 for a body too large, else 400. */
  get status(): 400 | 413 {
    return this.rule === "too-large" ? 413 : 400
  }
}

/** The body parsed as JSON (an empty body is refused as not JSON). */
export const json = (
  request: HttpServerRequest.HttpServerRequest,
  options: { readonly maxBytes: number; readonly maxDepth: number }
): Effect.Effect<unknown, BodyRefused | HttpServerError.HttpServerError> =>
  Effect.flatMap(Body.read(request, options.maxBytes), (read) => {
    if (Result.isFailure(read)) {
      return Effect.fail(new BodyRefused({ rule: "too-large", detail: `larger than ${options.maxBytes} bytes` }))
    }
    const text = new TextDecoder().decode(read.success)
    if (JsonDepth.exceeds(text, options.maxDepth)) {
      return Effect.fail(
        new BodyRefused({ rule: "too-deep", detail: `JSON nested more than ${options.maxDepth} deep` })
      )
    }
    return Effect.try({
      try: (): unknown => JSON.parse(text),
      catch: () => new BodyRefused({ rule: "not-json", detail: "not a JSON document" })
    })
  })
