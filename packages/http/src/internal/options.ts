/**
 * The middleware's options, decoded once when it is built: a bad one is a
 * `DurableConfigError` naming it. Header names are matched in lower case, as Node gives them.
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { Options } from "../Idempotency.js"
import type { Bounds } from "../IdempotencyKey.js"
import { DEFAULT_TYPE_BASE } from "../Problem.js"

/** Every default of the middleware, read by the options schema and the README. */
export const Defaults = {
  header: "Idempotency-Key",
  minKeyLength: 1,
  maxKeyLength: 255,
  methods: ["POST", "PATCH"],
  maxRequestBytes: 1024 * 1024,
  maxJsonDepth: 64,
  maxResponseBytes: 1024 * 1024,
  storedHeaders: ["content-type", "content-language", "location", "etag", "last-modified"],
  replayHeader: "Idempotent-Replayed",
  inFlight: "conflict",
  retryAfterSeconds: 1,
  problemTypeBase: DEFAULT_TYPE_BASE
} as const

/** The ledger stores at most 4 MiB per record. */
const MAX_RESPONSE_BYTES = 4 * 1024 * 1024

/** The most `maxJsonDepth` may be: decoding a recursive schema overflowed the stack from about 1,000 levels. */
const MAX_JSON_DEPTH = 512

/** Headers that belong to one response, or to the connection, and are never stored or replayed. */
export const NEVER_STORED: ReadonlySet<string> = new Set([
  "set-cookie",
  "set-cookie2",
  "date",
  "connection",
  "keep-alive",
  "transfer-encoding",
  "content-length",
  "trailer",
  "upgrade"
])

const HeaderName = Schema.String.check(Schema.makeFilter((name) => /^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}$/.test(name), { message: "an HTTP header name (token characters, at most 64)" }))
const StoredHeader = HeaderName.check(Schema.makeFilter((name) => !NEVER_STORED.has(name.toLowerCase()), { message: "not Set-Cookie, Date, Content-Length or a connection header: those are never replayed" }))

const OptionsSchema = Schema.Struct({
  header: HeaderName.pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.header))),
  minKeyLength: Input.Count(255).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.minKeyLength))),
  maxKeyLength: Input.Count(255).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.maxKeyLength))),
  methods: Schema.Array(Schema.Literals(["POST", "PATCH", "PUT", "DELETE"])).check(Schema.isMinLength(1)).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.methods))),
  maxRequestBytes: Input.Count(64 * 1024 * 1024, 0).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.maxRequestBytes))),
  maxJsonDepth: Input.Count(MAX_JSON_DEPTH).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.maxJsonDepth))),
  maxResponseBytes: Input.Count(MAX_RESPONSE_BYTES, 0).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.maxResponseBytes))),
  storedHeaders: Schema.Array(StoredHeader).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.storedHeaders))),
  replayHeader: HeaderName.pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.replayHeader))),
  inFlight: Schema.Literals(["conflict", "wait"]).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.inFlight))),
  retryAfterSeconds: Input.Count(3600, 0).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.retryAfterSeconds))),
  problemTypeBase: Input.Text(512).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.problemTypeBase)))
})

export interface Settings {
  /** The key's header, lower case (as Node gives it). */
  readonly header: string
  /** The key's header as configured, for messages and documentation. */
  readonly headerName: string
  readonly bounds: Bounds
  readonly methods: ReadonlySet<string>
  readonly maxRequestBytes: number
  readonly maxJsonDepth: number
  readonly maxResponseBytes: number
  /** Lower case, without the never-stored ones. */
  readonly storedHeaders: ReadonlyArray<string>
  /** Lower case. */
  readonly replayHeader: string
  readonly inFlight: "conflict" | "wait"
  readonly retryAfterSeconds: number
  readonly problemTypeBase: string
}

const decodeSchema = Input.options(OptionsSchema, "idempotency")

export const decode = (options: Options): Effect.Effect<Settings, DurableConfigError> =>
  Effect.flatMap(decodeSchema(options), (decoded) => {
    if (decoded.minKeyLength > decoded.maxKeyLength) {
      return Effect.fail(new DurableConfigError({ field: "idempotency.minKeyLength", rule: "at most maxKeyLength" }))
    }
    return Effect.succeed({
      header: decoded.header.toLowerCase(),
      headerName: decoded.header,
      bounds: { minLength: decoded.minKeyLength, maxLength: decoded.maxKeyLength },
      methods: new Set(decoded.methods),
      maxRequestBytes: decoded.maxRequestBytes,
      maxJsonDepth: decoded.maxJsonDepth,
      maxResponseBytes: decoded.maxResponseBytes,
      storedHeaders: [...new Set(decoded.storedHeaders.map((name) => name.toLowerCase()))].filter((name) =>
        name !== decoded.replayHeader.toLowerCase()
      ),
      replayHeader: decoded.replayHeader.toLowerCase(),
      inFlight: decoded.inFlight,
      retryAfterSeconds: decoded.retryAfterSeconds,
      problemTypeBase: decoded.problemTypeBase
    })
  })
