/**
 * A response as the ledger stores it — status, the allowlisted headers and the body bytes —
 * and the replay built from it. Cookies live apart from the headers in a platform response
 * and are never read here; headers added after the middleware (pre-response handlers, the
 * server's Date) are not seen, so they are never stored either.
 */
import * as Effect from "effect/Effect"
import * as HttpBody from "effect/http/HttpBody"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"

/** What is stored beside the body (the ledger's JSON meta). */
export const StoredMeta = Schema.Struct({
  status: Schema.Int,
  headers: Schema.Record(Schema.String, Schema.String)
})
export type StoredMeta = typeof StoredMeta.Type

export interface Captured {
  /** The response to send now: the original, or one whose streamed body was buffered. */
  readonly response: HttpServerResponse.HttpServerResponse
  readonly body: Uint8Array
  readonly meta: StoredMeta
}

const utf8 = new TextEncoder()

const metaOf = (response: HttpServerResponse.HttpServerResponse, storedHeaders: ReadonlyArray<string>): StoredMeta => {
  const headers: Record<string, string> = {}
  for (const name of storedHeaders) {
    const value = response.headers[name]
    if (value !== undefined) headers[name] = value
  }
  return { status: response.status, headers }
}

/** The body's bytes, exactly as they will be sent; none for a body that cannot be captured or is too large. */
const bodyBytes = (
  response: HttpServerResponse.HttpServerResponse,
  maxBytes: number
): Effect.Effect<
  Option.Option<{ readonly bytes: Uint8Array; readonly response: HttpServerResponse.HttpServerResponse }>
> => {
  const fits = (bytes: Uint8Array) => bytes.byteLength <= maxBytes ? Option.some({ bytes, response }) : Option.none()
  const body = response.body
  switch (body._tag) {
    case "Empty":
      return Effect.succeed(Option.some({ bytes: new Uint8Array(0), response }))
    case "Uint8Array":
      return Effect.succeed(fits(body.body))
    case "Raw":
      return Effect.succeed(
        typeof body.body === "string"
          ? fits(utf8.encode(body.body))
          : body.body instanceof Uint8Array
          ? fits(body.body)
          : Option.none() // a Node stream or a web stream: not ours to consume
      )
    case "FormData":
      // Its multipart boundary is chosen when the server writes it: bytes taken now would differ.
      return Effect.succeed(Option.none())
    case "Stream": {
      // Consumable once: buffer it (bounded) and send the buffered bytes instead.
      const chunks: Array<Uint8Array> = []
      let size = 0
      return body.stream.pipe(
        Stream.runForEachWhile((chunk) =>
          Effect.sync(() => {
            size += chunk.byteLength
            if (size > maxBytes) return false
            chunks.push(chunk)
            return true
          })
        ),
        Effect.map(() => {
          if (size > maxBytes) return Option.none()
          const bytes = new Uint8Array(Buffer.concat(chunks))
          const buffered = HttpServerResponse.setBody(response, HttpBody.uint8Array(bytes, body.contentType))
          return Option.some({ bytes, response: buffered })
        }),
        Effect.orElseSucceed(() => Option.none())
      )
    }
  }
}

/** What to store for a response, or none when its body cannot be stored (then nothing is). */
export const capture = (
  response: HttpServerResponse.HttpServerResponse,
  options: { readonly maxBytes: number; readonly storedHeaders: ReadonlyArray<string> }
): Effect.Effect<Option.Option<Captured>> =>
  Effect.map(
    bodyBytes(response, options.maxBytes),
    Option.map(({ bytes, response }) => ({ response, body: bytes, meta: metaOf(response, options.storedHeaders) }))
  )

const decodeMeta = Schema.decodeUnknownSync(StoredMeta)

/** The stored response again: same status, stored headers and bytes, plus the replay marker. */
export const replay = (
  body: Uint8Array,
  meta: unknown,
  replayHeader: string
): HttpServerResponse.HttpServerResponse => {
  const { headers, status } = decodeMeta(meta)
  const { "content-type": contentType, ...rest } = headers
  const replayed = { ...rest, [replayHeader]: "true" }
  // A bodiless response stays bodiless: uint8Array() would add application/octet-stream.
  return body.byteLength === 0 && contentType === undefined
    ? HttpServerResponse.empty({ status, headers: replayed })
    : HttpServerResponse.uint8Array(body, {
      status,
      headers: replayed,
      ...(contentType === undefined ? {} : { contentType })
    })
}
