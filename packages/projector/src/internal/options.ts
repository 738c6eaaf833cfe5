/**
 * The projector's options: their defaults (one source), their decoding (one `Schema`, so a
 * bad option from code or from configuration is the same `DurableConfigError` naming it),
 * and the `PROJECTOR_*` variables that `layerConfig` reads.
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Options from "@effect-durable/core/Options"
import * as LeasedQueue from "@effect-durable/pg/LeasedQueue"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import type { ProjectorOptions } from "../Projector.js"

/** The options as the projector uses them: decoded, defaults applied. */
export interface Settings {
  /** The topics it delivers (a list, or the caller's live set: `topicsNow`); undefined: all. */
  readonly topics: ReadonlyArray<string> | (() => ReadonlyArray<string>) | undefined
  readonly workerId: string
  readonly batchSize: number
  /** The most messages of one ordering key per claim: `perKey`, or the batch size. */
  readonly perKey: number
  readonly concurrency: number
  readonly batchesInFlight: number
  readonly lease: Duration.Duration
  /** How often a batch's leases are renewed: a third of the lease, so two renewals may fail before it lapses. */
  readonly renewEvery: Duration.Duration
  readonly pollInterval: Duration.Duration
  readonly backoffMin: Duration.Duration
  readonly backoffMax: Duration.Duration
  /** Retry delay bounds of a topic, where they differ from `backoffMin`/`backoffMax`. */
  readonly backoffByTopic: Readonly<
    Record<string, { readonly min: Duration.Duration; readonly max: Duration.Duration }>
  >
  readonly deliveryTimeout: Duration.Duration
  readonly shutdownDeadline: Duration.Duration
  readonly maxLeaseExpiries: number
  readonly listenUrl: Redacted.Redacted<string> | undefined
  readonly schemas: Readonly<Record<string, Schema.Decoder<unknown>>>
}

const Span = (max: string) => Input.DurationIn({ max })

/** The projector's options, each declared once: rule, default, variable, purpose, example. */
export const ProjectorOptionsTable = Options.declare({
  // The same rule as `Outbox.enqueue`'s topics: a topic the outbox refuses is refused here.
  topics: Options.option({
    schema: Schema.Array(Input.Text(128)).check(Schema.isMinLength(1), Schema.isMaxLength(1000)),
    optional: true,
    variable: "PROJECTOR_TOPICS",
    text: "list",
    purpose: "comma-separated topics to deliver (default: all)",
    example: "order-placed,order-paid"
  }),
  workerId: Options.option({
    schema: Schema.String.check(
      Schema.makeFilter((id) => /^[\x21-\x7e]{1,128}$/.test(id), {
        message: "1-128 printable ASCII characters without spaces"
      })
    ),
    optional: true,
    variable: "PROJECTOR_WORKER_ID",
    purpose: "the worker id stored with each claim (default: host:pid:random)",
    example: "projector-1"
  }),
  // A claim and a mark cost about the same for 100 rows as for 500 (`npm run bench`).
  batchSize: Options.option({
    schema: Input.Count(1000),
    default: 500,
    variable: "PROJECTOR_BATCH_SIZE",
    text: "integer",
    purpose: "messages per claim (1-1000)",
    example: "500"
  }),
  // A key's backlog is delivered from one claim in a run; 1 is one message per key per claim.
  perKey: Options.option({
    schema: Input.Count(1000),
    optional: true,
    variable: "PROJECTOR_PER_KEY",
    text: "integer",
    purpose:
      "the most messages of one ordering key per claim, delivered in order on one lane (1-1000; default: the batch size)",
    example: "500"
  }),
  concurrency: Options.option({
    schema: Input.Count(1000),
    default: 16,
    variable: "PROJECTOR_CONCURRENCY",
    text: "integer",
    purpose: "deliveries in flight at once (1-1000)",
    example: "16"
  }),
  batchesInFlight: Options.option({
    schema: Input.Count(64),
    default: 3,
    variable: "PROJECTOR_BATCHES_IN_FLIGHT",
    text: "integer",
    purpose: "batches' worth of messages claimed and not yet marked; also the claim loops, at most 3 (1-64)",
    example: "3"
  }),
  lease: Options.option({
    schema: Span("1 day"),
    default: "30 seconds",
    variable: "PROJECTOR_LEASE",
    purpose: "the claim lease",
    example: "30 seconds"
  }),
  pollInterval: Options.option({
    schema: Span("1 hour"),
    default: "1 second",
    variable: "PROJECTOR_POLL_INTERVAL",
    purpose: "the longest sleep when no NOTIFY arrives",
    example: "1 second"
  }),
  backoffMin: Options.option({
    schema: Span("1 day"),
    default: "1 second",
    variable: "PROJECTOR_BACKOFF_MIN",
    purpose: "the shortest retry delay",
    example: "1 second"
  }),
  backoffMax: Options.option({
    schema: Span("30 days"),
    default: "5 minutes",
    variable: "PROJECTOR_BACKOFF_MAX",
    purpose: "the longest retry delay",
    example: "5 minutes"
  }),
  backoffByTopic: Options.option({
    schema: Schema.Record(
      Input.Text(128),
      Schema.Struct({ min: Schema.optionalKey(Span("1 day")), max: Schema.optionalKey(Span("30 days")) })
    ),
    default: {},
    purpose: "retry delay bounds by topic, over `backoff` (code only)",
    example: "{ \"order-placed\": { min: \"100 millis\", max: \"10 seconds\" } }"
  }),
  deliveryTimeout: Options.option({
    schema: Span("1 day"),
    default: "10 seconds",
    variable: "PROJECTOR_DELIVERY_TIMEOUT",
    purpose: "how long a delivery may take",
    example: "10 seconds"
  }),
  shutdownDeadline: Options.option({
    schema: Span("1 hour"),
    default: "10 seconds",
    variable: "PROJECTOR_SHUTDOWN_DEADLINE",
    purpose: "how long shutting down waits for deliveries",
    example: "10 seconds"
  }),
  maxLeaseExpiries: Options.option({
    schema: Input.Count(1000),
    default: LeasedQueue.Defaults.maxLeaseExpiries,
    variable: "PROJECTOR_MAX_LEASE_EXPIRIES",
    text: "integer",
    purpose: "leases a message may lose before it is dead",
    example: "10"
  }),
  listenUrl: Options.option({
    schema: Schema.Redacted(Schema.String).check(
      Schema.makeFilter((url) => /^postgres(ql)?:\/\/\S+$/.test(Redacted.value(url)), {
        message: "a PostgreSQL URL (postgres://user:password@host:port/database), straight to the server"
      })
    ),
    optional: true,
    variable: "PROJECTOR_LISTEN_URL",
    text: "redacted",
    purpose: "a URL straight to PostgreSQL for LISTEN, when the pool goes through a transaction pooler",
    example: "postgres://app:secret@db-primary:5432/app"
  }),
  schemas: Options.option({
    schema: Schema.Record(Schema.String, Schema.Any),
    default: {},
    purpose: "payload schemas by topic (code only)",
    example: "{ \"order-placed\": OrderPlaced }"
  })
})

/** Every default of the projector, from its declarations. */
export const Defaults = ProjectorOptionsTable.defaults

/** Every `PROJECTOR_*` variable: what it is for and a value that works (said when one is wrong). */
export const Variables = ProjectorOptionsTable.variables

/** `backoff: { min, max }` as the table's two fields, and their names back in errors. */
const flat = ({ backoff, topics, ...rest }: ProjectorOptions): Record<string, unknown> => ({
  ...rest,
  // A live set is checked by each claim; a list here, like every other option.
  ...(topics === undefined || typeof topics === "function" ? {} : { topics }),
  ...(backoff?.min === undefined ? {} : { backoffMin: backoff.min }),
  ...(backoff?.max === undefined ? {} : { backoffMax: backoff.max })
})
const nested = (error: DurableConfigError): DurableConfigError =>
  error.field.startsWith("backoffM")
    ? new DurableConfigError({ field: error.field === "backoffMin" ? "backoff.min" : "backoff.max", rule: error.rule })
    : error

const settingsOf = (
  decoded: typeof ProjectorOptionsTable.decode extends (i: unknown) => Effect.Effect<infer A, any> ? A : never,
  live?: () => ReadonlyArray<string>
) =>
  Effect.gen(function*() {
    if (Duration.isGreaterThan(decoded.backoffMin, decoded.backoffMax)) {
      return yield* new DurableConfigError({ field: "backoff", rule: "min must not exceed max" })
    }
    const backoffByTopic: Record<string, { readonly min: Duration.Duration; readonly max: Duration.Duration }> = {}
    for (const [topic, bounds] of Object.entries(decoded.backoffByTopic)) {
      const min = bounds.min ?? decoded.backoffMin
      const max = bounds.max ?? decoded.backoffMax
      if (Duration.isGreaterThan(min, max)) {
        return yield* new DurableConfigError({
          field: `backoffByTopic.${topic}`,
          rule: "min must not exceed max (an absent bound is the projector's backoff)"
        })
      }
      backoffByTopic[topic] = { min, max }
    }
    return {
      ...decoded,
      perKey: decoded.perKey ?? decoded.batchSize,
      backoffByTopic,
      schemas: decoded.schemas as Readonly<Record<string, Schema.Decoder<unknown>>>,
      topics: live ?? decoded.topics,
      listenUrl: decoded.listenUrl,
      workerId: decoded.workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString("hex")}`,
      renewEvery: Duration.divideUnsafe(decoded.lease, 3)
    } satisfies Settings
  })

/** Decodes the options; a bad one is a `DurableConfigError` naming it. */
export const decodeOptions = (options: ProjectorOptions): Effect.Effect<Settings, DurableConfigError> =>
  Effect.flatMap(
    Effect.mapError(ProjectorOptionsTable.decode(flat(options)), nested),
    (decoded) => settingsOf(decoded, liveTopics(options))
  )

const liveTopics = (options: ProjectorOptions) => typeof options.topics === "function" ? options.topics : undefined

/** The topics to claim now (a live set asked anew); undefined: all. */
export const topicsNow = (settings: Settings): ReadonlyArray<string> | undefined =>
  typeof settings.topics === "function" ? settings.topics() : settings.topics

/** The options from the `PROJECTOR_*` variables (unset ones take the defaults), `overrides` from code winning. */
export const fromConfig = (overrides: ProjectorOptions = {}): Effect.Effect<Settings, DurableConfigError> =>
  Effect.flatMap(
    ProjectorOptionsTable.fromConfig(flat(overrides)),
    (decoded) => settingsOf(decoded, liveTopics(overrides))
  ).pipe(
    Effect.mapError((error) =>
      error.field === "backoff" ? new DurableConfigError({ ...error, field: "PROJECTOR_BACKOFF_MIN" }) : error
    )
  )
