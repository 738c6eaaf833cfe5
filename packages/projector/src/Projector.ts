/**
 * The projector: a fiber that claims outbox messages and delivers them through the
 * `Publisher`, at least once. It holds no row lock while delivering (the claim is a lease,
 * renewed for slow deliveries), never settles a message with a stale claim, delivers the
 * messages of one ordering key one at a time in id order, and wakes on the outbox's NOTIFY
 * as well as on a poll interval (so it also works through a pooler that carries no NOTIFY).
 * Closing its scope stops claiming, lets in-flight deliveries finish within the shutdown
 * deadline and releases whatever is left, so another worker takes it at once.
 *
 * The roles live in `internal/`: options (defaults, decoding, config), batches (claim and
 * settle), lanes (publishing), keeper (deadlines, lease renewal), telemetry; its LISTEN is
 * `@effect-durable/pg/Notifications`.
 *
 * @since 0.1.0
 */
import type { DatabaseError, DurableConfigError, InvalidInput } from "@effect-durable/core/Errors"
import { printable } from "@effect-durable/core/Printable"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import { listen } from "@effect-durable/pg/Notifications"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import type * as Schema from "effect/Schema"
import { addCounts, makeBatches, noCounts } from "./internal/batches.js"
import { runLoops } from "./internal/loop.js"
import { decodeOptions, fromConfig, type Settings, topicsNow } from "./internal/options.js"
import type { Publisher } from "./Publisher.js"

export { Defaults, Variables } from "./internal/options.js"
/** The options as a running projector uses them: decoded, defaults applied. */
export type { Settings as ProjectorSettings } from "./internal/options.js"
/** The settings the `PROJECTOR_*` variables give (what `layerConfig` runs with), `overrides` winning. */
export { fromConfig as settingsFromConfig } from "./internal/options.js"
export { metrics } from "./internal/telemetry.js"

export interface ProjectorOptions {
  /**
   * Topics to deliver; default all. A function is asked anew at every claim and every NOTIFY: a
   * set that grows and shrinks while the projector runs (the workflow engine's one projector for
   * all the workflows a process registers). While it returns none, nothing is claimed; a topic
   * it returns that the outbox refuses fails that claim (logged, retried after the backoff).
   */
  readonly topics?: ReadonlyArray<string> | (() => ReadonlyArray<string>)
  /** Worker id stored with each claim; default host:pid:random. */
  readonly workerId?: string
  /** Messages per claim (1-1000). Default 500. */
  readonly batchSize?: number
  /**
   * The most messages of one ordering key a claim takes (1-1000). Default: the batch size. A
   * key's backlog comes as one run, delivered in order on one lane, each message after the one
   * before succeeded; 1 takes one message per key per claim (the rule of 0.2).
   */
  readonly perKey?: number
  /** Deliveries in flight at once, across all batches in flight. Default 16. */
  readonly concurrency?: number
  /**
   * Batches in flight at once: while one batch is delivered and marked, the next is already
   * claimed, so the database's round trips overlap the delivery work. So many claim loops run (at most 3),
   * and at most so many batches' worth of messages are claimed and not yet marked (a batch's
   * published messages are marked within a second even while one of them takes long: that one
   * holds only its own share). Default 3.
   */
  readonly batchesInFlight?: number
  /** Lease of a claim; renewed every third of it while a batch is delivered. Default 30 s. */
  readonly lease?: Duration.Input
  /** Longest sleep between claims when no NOTIFY arrives. Default 1 s. */
  readonly pollInterval?: Duration.Input
  /** Retry delay: exponential in the attempt with full jitter, between min and max. Default 1 s – 5 min. */
  readonly backoff?: { readonly min?: Duration.Input; readonly max?: Duration.Input }
  /**
   * Retry delay bounds by topic, over `backoff` (an absent bound is `backoff`'s). With the
   * outbox's `maxAttemptsByTopic`, a topic's retry policy: for a keyed topic it bounds how
   * long one failing message holds back the messages of its key behind it.
   */
  readonly backoffByTopic?: Readonly<
    Record<string, { readonly min?: Duration.Input; readonly max?: Duration.Input }>
  >
  /** A delivery taking longer fails retryable. Default 10 s. */
  readonly deliveryTimeout?: Duration.Input
  /** How long closing waits for in-flight deliveries before releasing them. Default 10 s. */
  readonly shutdownDeadline?: Duration.Input
  /** Payload schemas by topic: a payload that does not decode goes to the dead letters at once. */
  readonly schemas?: Readonly<Record<string, Schema.Decoder<unknown>>>
  /** Leases a message may lose (its worker died or stalled) before it is dead. Default 10. */
  readonly maxLeaseExpiries?: number
  /**
   * Where to LISTEN, when the pool goes through a transaction pooler (PgBouncer), which does
   * not carry notifications: a URL straight to PostgreSQL. Without it the listener uses the
   * pool's settings (behind such a pooler, deliveries then wait for the poll interval).
   */
  readonly listenUrl?: Redacted.Redacted<string>
}

/** What one run delivered. */
export interface Counts {
  readonly claimed: number
  readonly delivered: number
  readonly retried: number
  readonly dead: number
  /** Deliveries whose claim went stale (lease lost): never marked, counted here. */
  readonly stale: number
  /**
   * Messages of a keyed run given back unstarted because an earlier message of their key did
   * not succeed in the same batch (no attempt counted): claimed again after it.
   */
  readonly heldBack: number
  /** Messages cancelled while this projector held them (`OutboxAdmin.cancel`): never marked. */
  readonly cancelled: number
}

export class Projector extends Context.Service<Projector, {
  readonly workerId: string
  /** Totals since the projector started. */
  readonly counts: Effect.Effect<Counts>
}>()("@effect-durable/projector/Projector") {}

/**
 * Runs the projector in the layer's scope. It needs the outbox (`Outbox` for its NOTIFY
 * channel, `OutboxWorker`) and a `Publisher`; when a `PgClient` is present it also LISTENs
 * on the outbox channel (one dedicated connection, re-established if it drops).
 */
export const layer = (
  options: ProjectorOptions = {}
): Layer.Layer<Projector, DurableConfigError, Outbox.Outbox | OutboxWorker.OutboxWorker | Publisher> =>
  Layer.effect(
    Projector,
    Effect.flatMap(decodeOptions(options), make)
  )

/** The projector over decoded settings: `layer` and `layerConfig` both end here. */
const make = Effect.fnUntraced(function*(settings: Settings) {
  const pg = yield* Effect.serviceOption(PgClient.PgClient)
  const batches = yield* makeBatches(settings, yield* keeperOutbox(pg))
  const loops = yield* runLoops(batches.settings, batches)
  if (Option.isSome(pg)) {
    // Wake on the outbox's NOTIFY (an empty payload: the connection was (re)established), and
    // stop a delivery of this projector's the moment its message is cancelled.
    const { cancelChannel: cancels, channel } = yield* Outbox.Outbox
    const config = settings.listenUrl === undefined ? pg.value.config : { url: settings.listenUrl }
    yield* listen(config, [channel, cancels], (from, payload) => {
      if (from === cancels) {
        // (Re)connected: cancellations sent while it was down were not heard; the renewal
        // of every batch now finds them (a cancelled row refuses its lease).
        if (payload === "") batches.renewSoon()
        else if (batches.cancel(payload)) {
          Effect.runFork(
            Effect.logInfo(
              `effect-durable projector: message ${payload} was cancelled while delivered; its delivery is stopped`
            )
          )
        }
        return
      }
      const topics = topicsNow(settings)
      if (payload === "" || topics === undefined || topics.includes(payload)) loops.wake()
    })
  }
  return Projector.of({ workerId: settings.workerId, counts: loops.counts })
})

/**
 * The keeper's own `OutboxWorker`, on a pool of one connection, so that lease renewals never
 * wait behind the handlers for a connection of the shared pool. Only with a `PgClient` (and
 * the substrate's settings) in context; otherwise the keeper uses the shared worker.
 */
const keeperOutbox = (pg: Option.Option<PgClient.PgClient>) =>
  Effect.gen(function*() {
    const settings = yield* Effect.serviceOption(DurableSettings)
    if (Option.isNone(pg) || Option.isNone(settings)) return undefined
    return yield* Layer.build(
      PgClient.layer({ ...pg.value.config, maxConnections: 1, applicationName: KEEPER_APPLICATION_NAME })
    ).pipe(
      Effect.flatMap((client) =>
        OutboxWorker.make.pipe(Effect.provide(client), Effect.provideService(DurableSettings, settings.value))
      ),
      Effect.catch((error) =>
        Effect.as(
          Effect.logWarning(
            `effect-durable projector: no connection of its own for lease renewals (${
              printable(error.message)
            }); using the shared pool`
          ),
          undefined
        )
      )
    )
  })

/** `application_name` of the keeper's connection. */
export const KEEPER_APPLICATION_NAME = "effect-durable-keeper"

/** Delivers until no message is ready, then returns what happened (tests, one-shot jobs). */
export const drain: (
  options?: ProjectorOptions
) => Effect.Effect<Counts, DatabaseError | DurableConfigError | InvalidInput, OutboxWorker.OutboxWorker | Publisher> =
  Effect
    .fn("Projector.drain")(
      function*(options: ProjectorOptions = {}) {
        const batches = yield* makeBatches(yield* decodeOptions(options))
        yield* Effect.forkScoped(batches.keeper)
        let totals = noCounts
        while (true) {
          const counts = yield* batches.deliverBatch
          totals = addCounts(totals, counts)
          if (counts.claimed === 0) return totals
        }
      },
      Effect.scoped
    )

/** `layer` with its options read from the `PROJECTOR_*` variables (see `Variables`); `overrides` win. A bad value is a `DurableConfigError` naming its variable. */
export const layerConfig = (
  overrides: ProjectorOptions = {}
): Layer.Layer<Projector, DurableConfigError, Outbox.Outbox | OutboxWorker.OutboxWorker | Publisher> =>
  Layer.effect(Projector, Effect.flatMap(fromConfig(overrides), make))
