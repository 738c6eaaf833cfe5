/**
 * The projector's options: their defaults (one source), their decoding (one `Schema`, so a
 * bad option from code or from configuration is the same `DurableConfigError` naming it),
 * and the `PROJECTOR_*` variables that `layerConfig` reads.
 */
import type { DurableConfigError } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as LeasedQueue from "@effect-durable/pg/LeasedQueue"
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import type { ProjectorOptions } from "../Projector.js"

/** Every default of the projector, read by the schema below and documented in the README. */
export const Defaults = {
  /** A claim and a mark cost about the same for 100 rows as for 500 (`npm run bench`). */
  batchSize: 500,
  concurrency: 16,
  batchesInFlight: 3,
  lease: "30 seconds",
  pollInterval: "1 second",
  backoffMin: "1 second",
  backoffMax: "5 minutes",
  deliveryTimeout: "10 seconds",
  shutdownDeadline: "10 seconds",
  maxLeaseExpiries: LeasedQueue.Defaults.maxLeaseExpiries
} as const

/** The options as the projector uses them: decoded, defaults applied. */
export interface Settings {
  readonly topics: ReadonlyArray<string> | undefined
  readonly workerId: string
  readonly batchSize: number
  readonly concurrency: number
  readonly batchesInFlight: number
  readonly lease: Duration.Duration
  /** How often a batch's leases are renewed: a third of the lease, so two renewals may fail before it lapses. */
  readonly renewEvery: Duration.Duration
  readonly pollInterval: Duration.Duration
  readonly backoffMin: Duration.Duration
  readonly backoffMax: Duration.Duration
  readonly deliveryTimeout: Duration.Duration
  readonly shutdownDeadline: Duration.Duration
  readonly maxLeaseExpiries: number
  readonly listenUrl: Redacted.Redacted<string> | undefined
  readonly schemas: Readonly<Record<string, Schema.Decoder<unknown>>>
}

const Span = (max: string, fallback: string) =>
  Input.DurationIn({ max }).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Duration.fromInputUnsafe(fallback as Duration.Input))))

const OptionsSchema = Schema.Struct({
  // The same rule as `Outbox.enqueue`'s topics: a topic the outbox refuses is refused here.
  topics: Schema.optional(Schema.Array(Input.Text(128)).check(Schema.isMinLength(1), Schema.isMaxLength(1000))),
  workerId: Schema.optional(Schema.String.check(Schema.makeFilter((id) => /^[\x21-\x7e]{1,128}$/.test(id), { message: "1-128 printable ASCII characters without spaces" }))),
  batchSize: Input.Count(1000).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.batchSize))),
  concurrency: Input.Count(1000).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.concurrency))),
  batchesInFlight: Input.Count(64).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.batchesInFlight))),
  lease: Span("1 day", Defaults.lease),
  pollInterval: Span("1 hour", Defaults.pollInterval),
  backoff: Schema.Struct({ min: Span("1 day", Defaults.backoffMin), max: Span("30 days", Defaults.backoffMax) }).check(Schema.makeFilter((backoff) => Duration.isLessThanOrEqualTo(backoff.min, backoff.max), { message: "min must not exceed max" })).pipe(Schema.withDecodingDefaultType(Effect.sync(() => ({ min: Duration.fromInputUnsafe(Defaults.backoffMin), max: Duration.fromInputUnsafe(Defaults.backoffMax) })))),
  deliveryTimeout: Span("1 day", Defaults.deliveryTimeout),
  shutdownDeadline: Span("1 hour", Defaults.shutdownDeadline),
  maxLeaseExpiries: Input.Count(1000).pipe(Schema.withDecodingDefaultType(Effect.sync(() => Defaults.maxLeaseExpiries))),
  listenUrl: Schema.optional(Schema.Redacted(Schema.String).check(Schema.makeFilter((url) => /^postgres(ql)?:\/\/\S+$/.test(Redacted.value(url)), { message: "a PostgreSQL URL (postgres://user:password@host:port/database), straight to the server" }))),
  schemas: Schema.Record(Schema.String, Schema.Any).pipe(Schema.withDecodingDefaultType(Effect.sync(() => ({}))))
})

const decode = Input.options(OptionsSchema)

/** Decodes the options; a bad one is a `DurableConfigError` naming it. */
export const decodeOptions = (options: ProjectorOptions): Effect.Effect<Settings, DurableConfigError> =>
  Effect.map(decode(options), ({ backoff, listenUrl, topics, workerId, ...rest }) => ({
    ...rest,
    topics,
    listenUrl,
    workerId: workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString("hex")}`,
    backoffMin: backoff.min,
    backoffMax: backoff.max,
    renewEvery: Duration.divideUnsafe(rest.lease, 3)
  }))

/** Every `PROJECTOR_*` variable: what it is for and a value that works (said when one is wrong). */
export const Variables: Readonly<Record<string, Input.VariableHint>> = {
  PROJECTOR_TOPICS: { purpose: "comma-separated topics to deliver (default: all)", example: "order-placed,order-paid" },
  PROJECTOR_WORKER_ID: { purpose: "the worker id stored with each claim", example: "projector-1" },
  PROJECTOR_BATCH_SIZE: { purpose: "messages per claim (1-1000)", example: "500" },
  PROJECTOR_CONCURRENCY: { purpose: "deliveries in flight at once (1-1000)", example: "16" },
  PROJECTOR_BATCHES_IN_FLIGHT: { purpose: "batches claimed and delivered at once (1-64)", example: "3" },
  PROJECTOR_LEASE: { purpose: "the claim lease", example: "30 seconds" },
  PROJECTOR_POLL_INTERVAL: { purpose: "the longest sleep when no NOTIFY arrives", example: "1 second" },
  PROJECTOR_BACKOFF_MIN: { purpose: "the shortest retry delay", example: "1 second" },
  PROJECTOR_BACKOFF_MAX: { purpose: "the longest retry delay", example: "5 minutes" },
  PROJECTOR_DELIVERY_TIMEOUT: { purpose: "how long a delivery may take", example: "10 seconds" },
  PROJECTOR_SHUTDOWN_DEADLINE: { purpose: "how long shutting down waits for deliveries", example: "10 seconds" },
  PROJECTOR_MAX_LEASE_EXPIRIES: { purpose: "leases a message may lose before it is dead", example: "10" },
  PROJECTOR_LISTEN_URL: {
    purpose: "a URL straight to PostgreSQL for LISTEN, when the pool goes through a transaction pooler",
    example: "postgres://app:secret@db-primary:5432/app"
  }
}

/** Which variable each option comes from, to name it in errors. */
export const FieldVariables: Readonly<Record<string, string>> = {
  ...Object.fromEntries(
    Object.keys(Variables).map((variable) => [
      variable.slice("PROJECTOR_".length).toLowerCase().replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()),
      variable
    ])
  ),
  "backoff.min": "PROJECTOR_BACKOFF_MIN",
  "backoff.max": "PROJECTOR_BACKOFF_MAX",
  backoff: "PROJECTOR_BACKOFF_MIN"
}

/** The `PROJECTOR_*` variables (what each is for is in `Variables`); unset ones take the defaults above. */
export const config: Config.Config<ProjectorOptions> = Config.all({
  topics: Config.option(Config.Array(Schema.String, "PROJECTOR_TOPICS")),
  workerId: Config.option(Config.String("PROJECTOR_WORKER_ID")),
  batchSize: Config.option(Config.Int("PROJECTOR_BATCH_SIZE")),
  concurrency: Config.option(Config.Int("PROJECTOR_CONCURRENCY")),
  batchesInFlight: Config.option(Config.Int("PROJECTOR_BATCHES_IN_FLIGHT")),
  lease: Config.option(Config.String("PROJECTOR_LEASE")),
  pollInterval: Config.option(Config.String("PROJECTOR_POLL_INTERVAL")),
  backoffMin: Config.option(Config.String("PROJECTOR_BACKOFF_MIN")),
  backoffMax: Config.option(Config.String("PROJECTOR_BACKOFF_MAX")),
  deliveryTimeout: Config.option(Config.String("PROJECTOR_DELIVERY_TIMEOUT")),
  shutdownDeadline: Config.option(Config.String("PROJECTOR_SHUTDOWN_DEADLINE")),
  maxLeaseExpiries: Config.option(Config.Int("PROJECTOR_MAX_LEASE_EXPIRIES")),
  listenUrl: Config.option(Config.Redacted("PROJECTOR_LISTEN_URL"))
}).pipe(Config.map(({ backoffMax, backoffMin, ...rest }): ProjectorOptions => {
  const options: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(rest) as Array<[string, Option.Option<unknown>]>) {
    if (Option.isSome(value)) options[key] = value.value
  }
  if (Option.isSome(backoffMin) || Option.isSome(backoffMax)) {
    options.backoff = {
      ...(Option.isSome(backoffMin) ? { min: backoffMin.value } : {}),
      ...(Option.isSome(backoffMax) ? { max: backoffMax.value } : {})
    }
  }
  return options as ProjectorOptions
}))
