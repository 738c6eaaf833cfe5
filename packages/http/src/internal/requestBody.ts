/**
 * The request body, read once and bounded, and a request that serves it to the handler.
 *
 * Why not `request.arrayBuffer`: over `MaxBodySize` it fails without reading the rest, so no
 * 413 could be written on a connection whose client is still sending. The request's stream is
 * read (which also answers `Expect: 100-continue`) while under the limit.
 *
 * A body over the limit is answered 413 once it has been received whole: the rest is read and
 * discarded, up to `DRAIN_BYTES` past the limit, before the 413 is written. The 413 closes the
 * connection, and Node closes it soon after the response is flushed (NodeHttpServer: a FIN, then
 * a destroy 500 ms later); a socket closed while the client's bytes are still arriving is reset,
 * and the reset fails the client's next write (EPIPE) or drops the 413 it has not read yet — for
 * every client that sends its whole body before it reads, or whose upload outlasts the grace.
 * A request received whole leaves nothing to reset: its close is an ordinary FIN. Past the
 * bound, the 413 is answered at once and the rest discarded while the server closes (a client
 * still sending after that can see a reset). A declared length over the limit with
 * `Expect: 100-continue` is answered at once: the body was never asked for.
 */
import type * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as HttpServerError from "effect/http/HttpServerError"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as UrlParams from "effect/http/UrlParams"
import * as Result from "effect/Result"
import * as Stream from "effect/Stream"
import type { Readable } from "node:stream"
import * as JsonDepth from "./jsonDepth.js"

/** The body exceeded the limit; nothing of it is kept. */
export class TooLarge {
  readonly _tag = "TooLarge"
}

/** Bytes past the limit read and discarded before a 413, so that it is answered on a request received whole. */
const DRAIN_BYTES = 8 * 1024 * 1024

const isNodeReadable = (source: unknown): source is Readable =>
  typeof source === "object" && source !== null && typeof (source as Readable).on === "function" &&
  typeof (source as Readable).resume === "function"

const requestError = (request: HttpServerRequest.HttpServerRequest, description: string, cause: unknown) =>
  new HttpServerError.HttpServerError({
    reason: new HttpServerError.RequestParseError({ request, description, cause })
  })

const expectsContinue = (request: HttpServerRequest.HttpServerRequest) =>
  request.headers.expect?.toLowerCase().includes("100-continue") === true

/**
 * Reads and discards the rest of the body, up to `budget` bytes: `true` when it ended within
 * them. A body that breaks off (the client went away) counts as not ended.
 */
const discard = (request: HttpServerRequest.HttpServerRequest, budget: number): Effect.Effect<boolean> =>
  Effect.suspend(() => {
    let discarded = 0
    return request.stream.pipe(
      Stream.runForEachWhile((chunk) =>
        Effect.sync(() => {
          discarded += chunk.byteLength
          return discarded <= budget
        })
      ),
      Effect.map(() => discarded <= budget),
      Effect.orElseSucceed(() => false)
    )
  })

/**
 * A body that did not end within the bound: the rest of a Node body is discarded while the
 * 413 is written and the server closes the connection, up to `DRAIN_BYTES` more; then it is
 * left unread (the server's close cuts it).
 */
const discardWhileClosing = (request: HttpServerRequest.HttpServerRequest) => {
  const source = request.source
  if (!isNodeReadable(source) || source.readableEnded || source.destroyed) return
  let discarded = 0
  const onData = (chunk: Buffer) => {
    discarded += chunk.byteLength
    if (discarded > DRAIN_BYTES) {
      source.off("data", onData)
      source.pause()
    }
  }
  source.on("data", onData)
  source.resume()
}

const tooLarge = (request: HttpServerRequest.HttpServerRequest, ended: boolean): Result.Result<never, TooLarge> => {
  if (!ended) discardWhileClosing(request)
  return Result.fail(new TooLarge())
}

/**
 * Reads the whole body, or reports that it exceeds `limit` bytes once the rest has been
 * discarded (up to `DRAIN_BYTES`; a `Content-Length` over the limit is never kept).
 */
export const read = (
  request: HttpServerRequest.HttpServerRequest,
  limit: number
): Effect.Effect<Result.Result<Uint8Array, TooLarge>, HttpServerError.HttpServerError> => {
  const declared = Number(request.headers["content-length"] ?? Number.NaN)
  if (declared > limit) {
    if (expectsContinue(request)) return Effect.succeed(Result.fail(new TooLarge()))
    if (declared > limit + DRAIN_BYTES) return Effect.succeed(tooLarge(request, false))
    return Effect.map(discard(request, declared), (ended) => tooLarge(request, ended))
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
      Effect.flatMap((): Effect.Effect<Result.Result<Uint8Array, TooLarge>> =>
        size <= limit
          ? Effect.succeed(Result.succeed(new Uint8Array(Buffer.concat(chunks))))
          : Effect.map(discard(request, limit + DRAIN_BYTES - size), (ended) => tooLarge(request, ended))
      )
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
  const json = Effect.flatMap(
    text,
    (body) => Effect.try({ try: (): any => (body === "" ? null : JSON.parse(body)), catch: decodeError })
  )
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
    modify: {
      value: (options: Parameters<HttpServerRequest.HttpServerRequest["modify"]>[0]) =>
        buffered(request.modify(options), bytes)
    }
  }) as HttpServerRequest.HttpServerRequest
}

/** A JSON body nested deeper than the bound: the cause of the read failure `depthGuarded` gives. */
export class TooDeep {
  readonly _tag = "TooDeep"
}

/**
 * The same request, for a handler that reads the body itself (a request without a key):
 * its `text` and `json` fail, with a `RequestParseError` caused by `TooDeep`, when the body
 * nests deeper than `maxDepth`, before anything parses it. HttpApi makes a body it cannot
 * read a defect; `isTooDeep` finds that cause.
 */
export const depthGuarded = (
  request: HttpServerRequest.HttpServerRequest,
  maxDepth: number
): HttpServerRequest.HttpServerRequest => {
  const text = Effect.flatMap(request.text, (body) =>
    JsonDepth.exceeds(body, maxDepth)
      ? Effect.fail(requestError(request, `the JSON body is nested more than ${maxDepth} deep`, new TooDeep()))
      : Effect.succeed(body))
  const json = Effect.flatMap(text, (body) =>
    Effect.try({
      try: (): any => (body === "" ? null : JSON.parse(body)),
      catch: (cause) => requestError(request, "the request body could not be decoded", cause)
    }))
  return Object.create(request, {
    text: { value: text },
    json: { value: json },
    modify: {
      value: (options: Parameters<HttpServerRequest.HttpServerRequest["modify"]>[0]) =>
        depthGuarded(request.modify(options), maxDepth)
    }
  }) as HttpServerRequest.HttpServerRequest
}

/** Whether `cause` holds the failure of a `depthGuarded` read, as an error or as a defect. */
export const isTooDeep = (cause: Cause.Cause<unknown>): boolean =>
  cause.reasons.some((reason) => {
    const error = reason._tag === "Fail" ? reason.error : reason._tag === "Die" ? reason.defect : undefined
    return HttpServerError.isHttpServerError(error) && error.reason._tag === "RequestParseError" &&
      error.reason.cause instanceof TooDeep
  })
