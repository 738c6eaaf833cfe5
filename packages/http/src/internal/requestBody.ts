/**
 * The request body, read once and bounded, and a request that serves it to the handler.
 *
 * Why not `request.arrayBuffer`: over `MaxBodySize` it fails without reading the rest, so no
 * 413 could be written on a connection whose client is still sending. The request's stream is
 * read (which also answers `Expect: 100-continue`) while under the limit; on an overflow the
 * rest of a Node body is drained (up to a cap, then the connection is cut), so the 413 can
 * still be written.
 */
import * as HttpServerError from "effect/http/HttpServerError"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as UrlParams from "effect/http/UrlParams"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Stream from "effect/Stream"
import type { Readable } from "node:stream"

/** The body exceeded the limit; nothing of it is kept. */
export class TooLarge {
  readonly _tag = "TooLarge"
}

/** Bytes drained after an overflow before the connection is cut. */
const DRAIN_CAP = 8 * 1024 * 1024

const isNodeReadable = (source: unknown): source is Readable =>
  typeof source === "object" && source !== null && typeof (source as Readable).on === "function" &&
  typeof (source as Readable).resume === "function"

const requestError = (request: HttpServerRequest.HttpServerRequest, description: string, cause: unknown) =>
  new HttpServerError.HttpServerError({ reason: new HttpServerError.RequestParseError({ request, description, cause }) })

/** Discards the rest of an oversized body so the response can be written; cuts the connection past the cap. */
const drain = (request: HttpServerRequest.HttpServerRequest) => {
  const source = request.source
  if (!isNodeReadable(source)) return
  let drained = 0
  source.on("data", (chunk: Buffer) => {
    drained += chunk.byteLength
    if (drained > DRAIN_CAP) source.destroy()
  })
  source.resume()
}

/** Reads the whole body, or reports that it exceeds `limit` bytes (a `Content-Length` over it is refused unread). */
export const read = (
  request: HttpServerRequest.HttpServerRequest,
  limit: number
): Effect.Effect<Result.Result<Uint8Array, TooLarge>, HttpServerError.HttpServerError> => {
  const declared = Number(request.headers["content-length"] ?? Number.NaN)
  if (declared > limit) {
    drain(request)
    return Effect.succeed(Result.fail(new TooLarge()))
  }
  return Effect.suspend(() => {
    const chunks: Array<Uint8Array> = []
    let size = 0
    return request.stream.pipe(
      Stream.runForEachWhile((chunk) =>
        Effect.sync(() => {
          size += chunk.byteLength
          if (size > limit) return false
          chunks.push(chunk)
          return true
        })
      ),
      Effect.mapError((cause) => requestError(request, "the request body could not be read", cause)),
      Effect.map(() => {
        if (size <= limit) return Result.succeed(new Uint8Array(Buffer.concat(chunks)))
        drain(request)
        return Result.fail(new TooLarge())
      })
    )
  })
}

/** The same request, its body accessors serving `bytes` (multipart excepted: refused before this). */
export const buffered = (
  request: HttpServerRequest.HttpServerRequest,
  bytes: Uint8Array
): HttpServerRequest.HttpServerRequest => {
  const decodeError = (cause: unknown) => requestError(request, "the request body could not be decoded", cause)
  const text = Effect.sync(() => new TextDecoder().decode(bytes))
  const json = Effect.flatMap(text, (body) =>
    Effect.try({ try: (): any => (body === "" ? null : JSON.parse(body)), catch: decodeError }))
  const urlParamsBody = Effect.flatMap(text, (body) =>
    Effect.try({
      // A leading "?" is form data; URLSearchParams would drop it as a query prefix (as the platform reads it).
      try: () => UrlParams.fromInput(new URLSearchParams(body.replace(/^\?/, "%3F"))),
      catch: decodeError
    }))
  return Object.create(request, {
    text: { value: text },
    json: { value: json },
    urlParamsBody: { value: urlParamsBody },
    arrayBuffer: { value: Effect.sync(() => new Uint8Array(bytes).buffer) },
    stream: { get: () => Stream.succeed(bytes) },
    modify: { value: (options: Parameters<HttpServerRequest.HttpServerRequest["modify"]>[0]) => buffered(request.modify(options), bytes) }
  }) as HttpServerRequest.HttpServerRequest
}
