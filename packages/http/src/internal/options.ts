/**
 * The middleware's options, decoded once when it is built: a bad one is a
 * `DurableConfigError` naming it. Header names are matched in lower case, as Node gives them.
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Options from "@effect-durable/core/Options"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { Options as IdempotencyOptions } from "../Idempotency.js"
import type { Bounds } from "../IdempotencyKey.js"
import { DEFAULT_TYPE_BASE } from "../Problem.js"

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

const HeaderName = Schema.String.check(
  Schema.makeFilter((name) => /^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}$/.test(name), {
    message: "an HTTP header name (token characters, at most 64)"
  })
)
const StoredHeader = HeaderName.check(
  Schema.makeFilter((name) => !NEVER_STORED.has(name.toLowerCase()), {
    message: "not Set-Cookie, Date, Content-Length or a connection header: those are never replayed"
  })
)

/** The middleware's options, each declared once: rule, default, purpose, example (no variables: code only). */
export const IdempotencyOptionsTable = Options.declare({
  header: Options.option({
    schema: HeaderName,
    default: "Idempotency-Key",
    purpose: "the header that carries the key",
    example: "Idempotency-Key"
  }),
  minKeyLength: Options.option({
    schema: Input.Count(255),
    default: 1,
    purpose: "fewest characters in a key",
    example: "16"
  }),
  maxKeyLength: Options.option({
    schema: Input.Count(255),
    default: 255,
    purpose: "most characters in a key (at most 255)",
    example: "64"
  }),
  methods: Options.option({
    schema: Schema.Array(Schema.Literals(["POST", "PATCH", "PUT", "DELETE"])).check(Schema.isMinLength(1)),
    default: ["POST", "PATCH"],
    purpose: "methods that go through the ledger",
    example: `["POST", "PATCH", "PUT"]`
  }),
  maxRequestBytes: Options.option({
    schema: Input.Count(64 * 1024 * 1024, 0),
    default: 1024 * 1024,
    purpose: "largest request body with a key (larger: 413)",
    example: "1048576"
  }),
  maxJsonDepth: Options.option({
    schema: Input.Count(MAX_JSON_DEPTH),
    default: 64,
    purpose: "deepest nesting of a JSON body (deeper: 400)",
    example: "64"
  }),
  maxResponseBytes: Options.option({
    schema: Input.Count(MAX_RESPONSE_BYTES, 0),
    default: 1024 * 1024,
    purpose: "largest response stored (larger: rolled back, 500)",
    example: "1048576"
  }),
  storedHeaders: Options.option({
    schema: Schema.Array(StoredHeader),
    default: ["content-type", "content-language", "location", "etag", "last-modified"],
    purpose: "response headers stored and replayed",
    example: `["content-type", "location"]`
  }),
  replayHeader: Options.option({
    schema: HeaderName,
    default: "Idempotent-Replayed",
    purpose: "the header set to true on replays",
    example: "Idempotent-Replayed"
  }),
  inFlight: Options.option({
    schema: Schema.Literals(["conflict", "wait"]),
    default: "conflict",
    purpose: "a request whose key is in flight: 409 at once, or wait for the first",
    example: "wait"
  }),
  retryAfterSeconds: Options.option({
    schema: Input.Count(3600, 0),
    default: 1,
    purpose: "Retry-After seconds on a 409 or 503",
    example: "1"
  }),
  problemTypeBase: Options.option({
    schema: Input.Text(512),
    default: DEFAULT_TYPE_BASE,
    purpose: "base of the problem type URIs",
    example: "https://docs.example.com/problems/"
  })
}, "idempotency")

/** Every default of the middleware, from its declarations. */
export const Defaults = IdempotencyOptionsTable.defaults

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

export const decode = (options: IdempotencyOptions): Effect.Effect<Settings, DurableConfigError> =>
  Effect.flatMap(IdempotencyOptionsTable.decode(options), (decoded) => {
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
