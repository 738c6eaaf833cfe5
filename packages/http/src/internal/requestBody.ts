/**
 * The request body, read once and bounded, and a request that serves it to the handler.
 *
 * Why not `request.arrayBuffer`: on Node only `text` is cached per request, so a body read
 * here could not be read again by the handler (HttpApi reads binary payloads with
 * `arrayBuffer`); and `withMaxBodySize` destroys the socket on overflow, so no 413 could be
 * sent. On Node the `IncomingMessage` is read directly: an overflow stops buffering and drains
 * the rest (up to a cap, then the connection is cut), so the 413 can still be written.
 */
import * as HttpServerError from "effect/http/HttpServerError"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as UrlParams from "effect/http/UrlParams"
import * as Chunk from "effect/Chunk"
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

const transportError = (request: HttpServerRequest.HttpServerRequest, cause: unknown) =>
  new HttpServerError.RequestError({ request, reason: "Transport", cause })

/** Discards the rest of an oversized body so the response can be written; cuts the connection past the cap. */
const drain = (source: Readable) => {
  let drained = 0
  source.on("data", (chunk: Buffer) => {
    drained += chunk.byteLength
    if (drained > DRAIN_CAP) source.destroy()
  })
  source.resume()
}

const readNode = (request: HttpServerRequest.HttpServerRequest, source: Readable, limit: number) =>
  Effect.callback<Result.Result<Uint8Array, TooLarge>, HttpServerError.RequestError>((resume) => {
    const chunks: Array<Buffer> = []
    let size = 0
    const cleanup = () => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
    }
    const onData = (chunk: Buffer) => {
      size += chunk.byteLength
      if (size <= limit) return void chunks.push(chunk)
      cleanup()
      drain(source)
      resume(Effect.succeed(Result.fail(new TooLarge())))
    }
    const onEnd = () => {
      cleanup()
      // A copy: a small Buffer may be a view into Node's shared 8 KiB pool.
      resume(Effect.succeed(Result.succeed(new Uint8Array(Buffer.concat(chunks)))))
    }
    const onError = (cause: unknown) => {
      cleanup()
      resume(Effect.fail(transportError(request, cause)))
    }
    source.on("data", onData)
    source.once("end", onEnd)
    source.once("error", onError)
    return Effect.sync(cleanup)
  })

/** Any other platform: the request's stream, folded while under the limit. */
const readStream = (request: HttpServerRequest.HttpServerRequest, limit: number) =>
  request.stream.pipe(
    Stream.runFoldWhile(
      { size: 0, chunks: Chunk.empty<Uint8Array>() },
      (read) => read.size <= limit,
      (read, chunk) => ({ size: read.size + chunk.byteLength, chunks: Chunk.append(read.chunks, chunk) })
    ),
    Effect.map(({ chunks, size }) =>
      size > limit ? Result.fail(new TooLarge()) : Result.succeed(new Uint8Array(Buffer.concat(Chunk.toArray(chunks))))
    ),
    Effect.mapError((cause) => transportError(request, cause))
  )

/** Reads the whole body, or reports that it exceeds `limit` bytes (a `Content-Length` over it is refused unread). */
export const read = (
  request: HttpServerRequest.HttpServerRequest,
  limit: number
): Effect.Effect<Result.Result<Uint8Array, TooLarge>, HttpServerError.RequestError> => {
  const source = request.source
  const declared = Number(request.headers["content-length"] ?? Number.NaN)
  if (declared > limit) {
    if (isNodeReadable(source)) drain(source)
    return Effect.succeed(Result.fail(new TooLarge()))
  }
  return isNodeReadable(source) ? readNode(request, source, limit) : readStream(request, limit)
}

/** The same request, its body accessors serving `bytes` (multipart excepted: refused before this). */
export const buffered = (
  request: HttpServerRequest.HttpServerRequest,
  bytes: Uint8Array
): HttpServerRequest.HttpServerRequest => {
  const decodeError = (cause: unknown) => new HttpServerError.RequestError({ request, reason: "Decode", cause })
  const text = Effect.sync(() => new TextDecoder().decode(bytes))
  const json = Effect.flatMap(text, (body) =>
    Effect.try({ try: (): unknown => (body === "" ? null : JSON.parse(body)), catch: decodeError }))
  const urlParamsBody = Effect.flatMap(text, (body) =>
    Effect.try({ try: () => UrlParams.fromInput(new URLSearchParams(body)), catch: decodeError }))
  return Object.create(request, {
    text: { value: text },
    json: { value: json },
    urlParamsBody: { value: urlParamsBody },
    arrayBuffer: { value: Effect.sync(() => new Uint8Array(bytes).buffer) },
    stream: { get: () => Stream.succeed(bytes) }
  }) as HttpServerRequest.HttpServerRequest
}
