/**
 * The page's edge: what a request may carry (action bodies bounded in size and depth, then
 * decoded), how a failure is answered (by the error's type: a bad input 400, a database that
 * does not answer 503, anything else 500 and logged), and the exact-path rule every route is
 * held to.
 */
import { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import { printable } from "@effect-durable/core/Printable"
import * as ByteSize from "effect/ByteSize"
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as HttpIncomingMessage from "effect/http/HttpIncomingMessage"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { isMessageId, MESSAGE_ID_RULE } from "../ids.js"
import { stringify } from "../output.js"
import type { Html } from "./html.js"

/** A failure the page answers with its own status (too large, too deep, a set that moved). */
export class PageError extends Data.TaggedError("PageError")<{ readonly status: number; readonly message: string }> {}

/** Action bodies are ids (1,000 at most) or a filter and a count: this is many times enough. */
const MAX_BODY_BYTES = 64 * 1024
/** `{ "ids": [...] }` is two levels deep: deeper JSON is refused before it is parsed. */
const MAX_BODY_DEPTH = 4

const MessageIdText = Schema.String.check(Schema.makeFilter((id) => isMessageId(id), { message: MESSAGE_ID_RULE }))

const IdsBody = Schema.Struct({
  ids: Schema.Array(Schema.String).check(Schema.isMinLength(1), Schema.isMaxLength(1000)),
  consumer: Schema.optional(Schema.String)
})
const FilterBody = Schema.Struct({
  filter: Schema.String,
  /** The newest id of the count the operator confirmed (null: none matched). */
  upTo: Schema.optional(Schema.NullOr(MessageIdText)),
  /** The count the operator confirmed: the action does no more than this, and refuses (409) if the set moved. */
  expected: Schema.Number.check(Schema.makeFilter((n) => Number.isInteger(n) && n >= 1 && n <= 100_000_000, {
    message: "the count the operator confirmed (an integer from 1)"
  }))
})
export const ActionBody = Schema.Union([IdsBody, FilterBody])
/** Retry now (no reason) and move aside (a reason the operator typed) act on ids only. */
export const MessageActionBody = Schema.Struct({ ...IdsBody.fields, reason: Schema.optional(Schema.String) })
export const TopicBody = Schema.Struct({ topic: Schema.String })
export const ExecutionBody = Schema.Struct({ workflow: Schema.String, executionId: Schema.String })
export const ScheduleBody = Schema.Struct({ name: Schema.String })
export const LimitBody = Schema.Struct({
  topic: Schema.String,
  maxInFlight: Schema.optionalKey(Schema.NullOr(Schema.Number)),
  groupMaxInFlight: Schema.optionalKey(Schema.NullOr(Schema.Number)),
  /** `10/1m` as the CLI reads it; its burst apart. */
  rate: Schema.optionalKey(Schema.NullOr(Schema.String)),
  burst: Schema.optionalKey(Schema.NullOr(Schema.Number)),
  groupRate: Schema.optionalKey(Schema.NullOr(Schema.String)),
  groupBurst: Schema.optionalKey(Schema.NullOr(Schema.Number))
})

/** A stored-inbox consumer's limits as the page's form sends them. */
export const InboxLimitBody = Schema.Struct({
  consumer: Schema.String,
  maxInFlight: Schema.optionalKey(Schema.NullOr(Schema.Number)),
  rate: Schema.optionalKey(Schema.NullOr(Schema.String)),
  burst: Schema.optionalKey(Schema.NullOr(Schema.Number))
})

/** Whether JSON text nests arrays and objects deeper than `max` (strings skipped, escapes too). */
const nestedDeeperThan = (text: string, max: number): boolean => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 91 || c === 123) {
      if (++depth > max) return true
    } else if (c === 93 || c === 125) depth--
  }
  return false
}

/** A failure as the page shows it: the typed error's message and a status. */
export const describe = (cause: Cause.Cause<unknown>): { readonly status: number; readonly message: string } => {
  const failure = Cause.findErrorOption(cause)
  if (Option.isSome(failure)) {
    const error = failure.value
    if (error instanceof PageError) return { status: error.status, message: error.message }
    if (error instanceof InvalidInput || Schema.isSchemaError(error)) return { status: 400, message: error.message }
    if (error instanceof DatabaseError) return { status: 503, message: error.message }
  }
  return { status: 500, message: "internal error (logged on the server)" }
}

/** A failure's reason on one line, for a log line. */
export const reasonOf = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  return printable(error instanceof Error ? `${error.name}: ${error.message}` : String(error))
}

export const htmlResponse = (body: Html, status = 200) =>
  HttpServerResponse.text(body.value, { status, contentType: "text/html; charset=utf-8" })
export const jsonResponse = (body: unknown, status = 200) =>
  HttpServerResponse.text(stringify(body), { status, contentType: "application/json" })

/** The path of a request as it was sent: undecoded, unnormalized, without the query. */
export const rawPath = (originalUrl: string): string => {
  const path = originalUrl.replace(/^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/, "")
  const end = path.search(/[?#]/)
  return end === -1 ? path : path.slice(0, end)
}

/**
 * Whether `path` (as sent) is exactly what the route's `pattern` (its prefix included)
 * describes: every static segment with its case, a parameter any non-empty segment, no empty
 * segment (`//`), no trailing slash but at the page's root. The router itself is looser
 * (case-insensitive, slashes collapsed), which would let `/ADMIN/DURABLE/` or
 * `//admin/durable/` past a proxy's rule for `/admin/durable/`.
 */
export const exactlyAt = (pattern: string, path: string): boolean => {
  if (!path.startsWith("/")) return false
  const wildcard = pattern === "*" || pattern.endsWith("/*")
  const base = pattern === "*" ? "" : wildcard ? pattern.slice(0, -2) : pattern
  const want = base === "" || base === "/" ? [] : base.split("/").slice(1)
  const got = path.split("/").slice(1)
  if (got.length < want.length) return false
  for (let i = 0; i < want.length; i++) {
    const segment = got[i]!
    if (want[i]!.includes(":") ? segment === "" : segment !== want[i]) return false
  }
  const rest = got.slice(want.length)
  // `/prefix`, `/prefix/` and `/prefix/a/b` for a wildcard; nothing more for a route.
  return wildcard
    ? rest.every((segment, i) => segment !== "" || i === rest.length - 1)
    : rest.length === 0 || (want.length === 0 && rest.length === 1 && rest[0] === "")
}

/** Where the page is mounted, from the part of the path the router took off. */
export const basePathOf = (original: string, request: HttpServerRequest.HttpServerRequest): string => {
  const path = rawPath(request.url)
  if (original === path) return ""
  if (path === "/" && !original.endsWith("/")) return original
  return original.endsWith(path) ? original.slice(0, original.length - path.length) : ""
}

/** An action's JSON body: at most `MAX_BODY_BYTES` read (413), `MAX_BODY_DEPTH` deep, then decoded (400). */
export const body = <A>(schema: Schema.Decoder<A>) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const text = yield* request.text.pipe(
      Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(MAX_BODY_BYTES)),
      Effect.mapError((error) =>
        error.reason._tag === "RequestParseError" && error.reason.reason === "BodyTooLarge"
          ? new PageError({ status: 413, message: `an action's body is at most ${MAX_BODY_BYTES / 1024} KiB` })
          : new PageError({ status: 400, message: "the request body could not be read" })
      )
    )
    if (nestedDeeperThan(text, MAX_BODY_DEPTH)) {
      return yield* new PageError({
        status: 400,
        message: `an action's body is JSON nested at most ${MAX_BODY_DEPTH} levels`
      })
    }
    const json = yield* Effect.try({
      try: (): unknown => JSON.parse(text),
      catch: () => new PageError({ status: 400, message: "the request body is not JSON" })
    })
    return yield* Schema.decodeUnknownEffect(schema)(json)
  })
