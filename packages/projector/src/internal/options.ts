/**
 * The projector's options: their defaults (one source), their decoding (one `Schema`, so a
 * bad option from code or from configuration is the same `DurableConfigError` naming it),
 * and the `PROJECTOR_*` variables that `layerConfig` reads.
 */
import type { DurableConfigError } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
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
  shutdownDeadline: "10 seconds"
} as const

/** The options as the projector uses them: decoded, defaults applied. */
export interface Settings {
  readonly topics: ReadonlyArray<string> | undefined
  readonly workerId: string
  readonly batchSize: number
  readonly concurrency: number
  readonly batchesInFlight: number
  readonly lease: Duration.Duration
  readonly pollInterval: Duration.Duration
  readonly backoffMin: Duration.Duration
  readonly backoffMax: Duration.Duration
  readonly deliveryTimeout: Duration.Duration
  readonly shutdownDeadline: Duration.Duration
  readonly schemas: Readonly<Record<string, Schema.Schema<any, any, never>>>
}

const Span = (max: string, fallback: string) =>
  Schema.optionalWith(Input.DurationIn({ max }), { default: () => Duration.decode(fallback as Duration.DurationInput) })

const OptionsSchema = Schema.Struct({
  // The same rule as `Outbox.enqueue`'s topics: a topic the outbox refuses is refused here.
  topics: Schema.optional(Schema.Array(Input.Text(128)).pipe(Schema.minItems(1), Schema.maxItems(1000))),
  workerId: Schema.optional(Schema.String.pipe(Schema.filter((id) => /^[\x21-\x7e]{1,128}$/.test(id), {
    message: () => "1-128 printable ASCII characters without spaces"
  }))),
  batchSize: Schema.optionalWith(Input.Count(1000), { default: () => Defaults.batchSize }),
  concurrency: Schema.optionalWith(Input.Count(1000), { default: () => Defaults.concurrency }),
  batchesInFlight: Schema.optionalWith(Input.Count(64), { default: () => Defaults.batchesInFlight }),
  lease: Span("1 day", Defaults.lease),
  pollInterval: Span("1 hour", Defaults.pollInterval),
  backoff: Schema.optionalWith(
    Schema.Struct({ min: Span("1 day", Defaults.backoffMin), max: Span("30 days", Defaults.backoffMax) }).pipe(
      Schema.filter((backoff) => Duration.lessThanOrEqualTo(backoff.min, backoff.max), {
        message: () => "min must not exceed max"
      })
    ),
    { default: () => ({ min: Duration.decode(Defaults.backoffMin), max: Duration.decode(Defaults.backoffMax) }) }
  ),
  deliveryTimeout: Span("1 day", Defaults.deliveryTimeout),
  shutdownDeadline: Span("1 hour", Defaults.shutdownDeadline),
  schemas: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Any }), { default: () => ({}) })
})

const decode = Input.options(OptionsSchema)

/** Decodes the options; a bad one is a `DurableConfigError` naming it. */
export const decodeOptions = (options: ProjectorOptions): Effect.Effect<Settings, DurableConfigError> =>
  Effect.map(decode(options), ({ backoff, topics, workerId, ...rest }) => ({
    ...rest,
    topics,
    workerId: workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString("hex")}`,
    backoffMin: backoff.min,
    backoffMax: backoff.max
  }))

const variable = <A>(config: Config.Config<A>, description: string) =>
  Config.option(config).pipe(Config.withDescription(description))

/** The `PROJECTOR_*` variables; unset ones take the defaults above. */
export const config: Config.Config<ProjectorOptions> = Config.all({
  topics: variable(Config.array(Config.string(), "PROJECTOR_TOPICS"), "comma-separated topics to deliver (default: all)"),
  workerId: variable(Config.string("PROJECTOR_WORKER_ID"), "worker id stored with each claim (default host:pid:random)"),
  batchSize: variable(Config.integer("PROJECTOR_BATCH_SIZE"), "messages per claim"),
  concurrency: variable(Config.integer("PROJECTOR_CONCURRENCY"), "deliveries in flight at once"),
  batchesInFlight: variable(Config.integer("PROJECTOR_BATCHES_IN_FLIGHT"), "batches claimed and delivered at once"),
  lease: variable(Config.string("PROJECTOR_LEASE"), "claim lease"),
  pollInterval: variable(Config.string("PROJECTOR_POLL_INTERVAL"), "longest sleep when no NOTIFY arrives"),
  backoffMin: variable(Config.string("PROJECTOR_BACKOFF_MIN"), "shortest retry delay"),
  backoffMax: variable(Config.string("PROJECTOR_BACKOFF_MAX"), "longest retry delay"),
  deliveryTimeout: variable(Config.string("PROJECTOR_DELIVERY_TIMEOUT"), "a slower delivery fails retryable"),
  shutdownDeadline: variable(Config.string("PROJECTOR_SHUTDOWN_DEADLINE"), "how long closing waits for deliveries")
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
